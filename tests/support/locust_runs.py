"""Running Locust (examples/locustfile.py) as real processes against the simulated engine, and
reading back what it printed and what peakload stored: Locust's CSV percentiles, and the same
metrics computed from the raw rows with analysis.metrics' definitions."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis.metrics import ChunkArrays, e2e_ms, itl_per_token_ms, tpot_ms, ttft_ms
from tests.support.sim import ROOT

LOCUSTFILE = ROOT / "examples" / "locustfile.py"
PERCENTILES = (50, 90, 99)


def locust_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PEAKLOAD_DATABASE_URL"] = database_url
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PEAKLOAD_HOME", None)
    return env


def locust_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]


def run(cmd: list[str], env: dict[str, str], timeout_s: float, log: Path) -> int:
    """Run `cmd` to its end (killed past `timeout_s`); its output goes to `log`."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"{cmd[3:]} did not end in {timeout_s} s: {log.read_text()}"
            ) from None


def locust_stats(prefix: Path) -> dict[str, dict[str, Any]]:
    """`{Type: row}` from Locust's `<prefix>_stats.csv` (the aggregated row left out)."""
    with Path(f"{prefix}_stats.csv").open(newline="") as fh:
        return {r["Type"]: r for r in csv.DictReader(fh) if r["Type"]}


def locust_histograms(path: Path) -> dict[str, dict[int, int]]:
    """`{Type: {rounded ms: count}}` from Locust's `--json-file` (written at its very end, after
    every event; its CSV is rewritten once a second and may miss the last one)."""
    entries = json.loads(Path(f"{path}.json").read_text())
    return {e["method"]: {int(k): v for k, v in e["response_times"].items()} for e in entries}


def bucketed(values: np.ndarray) -> dict[int, int]:
    """The histogram Locust keeps of `values` (ms)."""
    counts: dict[int, int] = {}
    for v in values.tolist():
        b = locust_bucket(v)
        counts[b] = counts.get(b, 0) + 1
    return counts


def stored_requests(url: str, run_id: str) -> pd.DataFrame:
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT request_id::text, shard_id, outcome, phase, level, sent_ns, first_token_ns, "
            "(extract(epoch FROM scheduled_at) * 1e6)::bigint AS scheduled_us, "
            "end_ns, output_tokens, http_status, error_phase, chunk_offsets_us, chunk_tokens "
            "FROM requests "
            "WHERE run_id = %s",
            (run_id,),
        )
        cols = [d.name for d in cur.description or []]
        return pd.DataFrame(cur.fetchall(), columns=cols)


def stored_metrics(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """What Locust was told, at full precision, from the raw rows (ms): every ok request's
    TTFT, TPOT and per-token ITL; the E2E of every request that was sent and not cancelled
    by the test's end (failures too: Locust times them), 0 for one that never got sent."""
    ok = df[df["outcome"] == "ok"]
    chunks = ChunkArrays.from_lists(ok["chunk_offsets_us"], ok["chunk_tokens"])
    tpot = tpot_ms(ok)
    told = df[~df["outcome"].isin(["cancelled", "not_sent"])]
    return {
        "TTFT": ttft_ms(ok),
        "TPOT": tpot[np.isfinite(tpot)],
        "E2E": np.nan_to_num(e2e_ms(told), nan=0.0),
        "ITL": itl_per_token_ms(chunks),
    }


def locust_failures(prefix: Path) -> dict[str, int]:
    """`{kind: occurrences}` from Locust's `<prefix>_failures.csv` (errors are the repr of
    loadgen.locust.user.RequestFailed(kind))."""
    with Path(f"{prefix}_failures.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    out: dict[str, int] = {}
    for r in rows:
        assert r["Method"] == "E2E" and r["Error"].startswith("RequestFailed("), r
        out[r["Error"][len("RequestFailed('") : -2]] = int(r["Occurrences"])
    return out


def locust_bucket(ms: float) -> int:
    """Locust's rounding of a response time before it is counted (locust.stats.
    bucket_response_time, copied: importing Locust here would monkey-patch pytest with gevent)."""
    if ms < 100:
        return round(ms)
    for limit, digits in ((1000, -1), (10000, -2)):
        if ms < limit:
            return int(round(ms, digits))
    return int(round(ms, -3))


def locust_percentile(values: np.ndarray, q: float) -> int:
    """What Locust reports as the q-th percentile of `values` (ms): its rank rule on its
    rounded histogram (locust.stats.calculate_response_time_percentile)."""
    counts = bucketed(values)
    n, below = len(values), int(len(values) * q / 100)
    seen = 0
    for key in sorted(counts, reverse=True):
        seen += counts[key]
        if n - seen <= below:
            return key
    return 0


def compare_percentiles(
    stats: dict[str, dict[str, Any]], exact: dict[str, np.ndarray], steps: int = 0
) -> list[str]:
    """Where Locust's percentile is not what its own rounding and rank rule make of the stored
    rows' exact values (within `steps` of its rounding step: 1 ms below 100 ms, 10 below 1 s)."""
    bad = []
    for metric, values in exact.items():
        for q in PERCENTILES:
            ours = locust_percentile(values, q)
            theirs = float(stats[metric][f"{q}%"])
            step = 1 if ours < 100 else 10 if ours < 1000 else 100
            if abs(ours - theirs) > steps * step:
                exact_q = float(np.percentile(values, q))
                bad.append(f"{metric} p{q}: Locust {theirs}, stored rows {ours} ({exact_q:.3f})")
    return bad
