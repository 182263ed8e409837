"""Is a run the self-check calls valid within its bounds? Many runs at the edge, where the
generator is just saturating, each held to the simulated engine's truth log (issue 25, item 2).

Each run: a fresh sim (`loadgen.sim --preset fixed`, TTFT 50 ms, ITL 10 ms, its threads at
nice -10 so it stands for a server on another machine), one measuring shard through the real
runner path (tests/support/shards.py: `run_shard` with kernel stamps, warm connections, the
monotonic clock as the wall anchor so stamps compare with the sim's log), optionally beside
`--hogs` busy-looping processes that starve the generator part of the time. Per run it prints
the self-check's verdict and the measured errors against the truth (TTFT error per request,
ITL error per token, as tests/loadgen/test_against_sim.py computes them), and at the end the
counts: valid and within bounds, valid but off (a false valid: the failure this bench looks
for), invalid and off (rightly flagged), invalid though within bounds (over-cautious).

    .venv/bin/python bench/validity_edge.py --streams 256 --runs 12 --hogs 1
    .venv/bin/python bench/validity_edge.py --streams 32 --runs 6 --hogs 0 --coalesce 4

Within bounds: TTFT error p99 and ITL error p99 under 2 ms (the `[validity]` default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.loadgen.test_against_sim import errors_against_truth, out_of_the_hogs_way  # noqa: E402
from tests.support.shards import make_spec, run_spec  # noqa: E402
from tests.support.sim import start_sim, truth_by_id  # noqa: E402

BOUND_MS = 2.0
HOG = "import time\nt = time.time() + 120\nwhile time.time() < t: pass"
HEALTH = (
    "loop_lag_p99_ms",
    "loop_lag_over_bound_share",
    "tokens_read_together_share",
    "first_tokens_read_together_share",
    "tokens_possibly_off_share",
    "first_tokens_possibly_off_share",
    "dispatch_delay_p99_ms",
)


def one_run(streams: int, hogs: int, duration_s: float, coalesce: int = 1) -> dict[str, Any]:
    sim_args = ["--preset", "fixed", "--ttft-ms", "50", "--itl-ms", "10"]
    if coalesce > 1:  # a bursty server: every write carries this many token events
        sim_args += ["--fault", f"coalesce:{coalesce}=1"]
    with start_sim(sim_args) as sim:
        out_of_the_hogs_way(sim.proc.pid)
        spec = make_spec(
            sim.base_url,
            {"concurrency": [streams], "duration_s": duration_s, "warmup_s": 1.0},
            workload={"prompt_tokens": 16, "output_tokens": 64},
        )
        procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        try:
            result, sink = run_spec(spec)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        ttft, itl = errors_against_truth(sink.records, truth_by_id(sim, len(sink.records)))
    ttft99 = float(np.percentile(np.abs(ttft), 99))
    itl99 = float(np.percentile(np.abs(itl), 99))
    return {
        "valid": result.valid,
        "within": ttft99 < BOUND_MS and itl99 < BOUND_MS,
        "requests": len(ttft),
        "ttft_err_p99_ms": round(ttft99, 2),
        "ttft_off_share": round(float(np.mean(np.abs(ttft) > BOUND_MS)), 4),
        "itl_err_p99_ms": round(itl99, 2),
        **{k: round(float(result.health.get(k, -1)), 4) for k in HEALTH},  # -1: not kept
        "reasons": [r.split(":")[0] for r in result.invalid_reasons],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--hogs", type=int, default=1, help="busy-looping processes beside it")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    ap.add_argument(
        "--coalesce", type=int, default=1, help="token events per server write (a bursty server)"
    )
    args = ap.parse_args()
    tally = {"valid, within": 0, "valid, off": 0, "invalid, off": 0, "invalid, within": 0}
    for i in range(args.runs):
        row = one_run(args.streams, args.hogs, args.duration, args.coalesce)
        key = f"{'valid' if row['valid'] else 'invalid'}, {'within' if row['within'] else 'off'}"
        tally[key] += 1
        print(json.dumps({"run": i + 1, **row}), flush=True)
    shape = {"streams": args.streams, "hogs": args.hogs, "coalesce": args.coalesce}
    print(json.dumps({**shape, "runs": args.runs, **tally}))
    sys.exit(1 if tally["valid, off"] else 0)


if __name__ == "__main__":
    main()
