"""Real runs for the UI tests, made the real way: the simulated engine as a subprocess and
`workers.local.run_local` writing into a test store. Each run lasts a few seconds.

Kinds: `sweep` (concurrency 1 → 4, two levels, a canary prompt from a dataset, on schedule
`nightly-sim`), `regions` (three regions at a fixed rate), `failures` (429s from the engine's
rate limit: a seeded fault could hit the preflight request and stop the run before it starts;
the canary key also as a header value and a query parameter),
`invalid` (validity bounds set absurdly low, so the generator's self-check fails).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import start_sim
from workers.local import run_local

CANARY_KEY_ENV = "PEAKLOAD_UI_TEST_CANARY_KEY"
CANARY_KEY = "sk-canary-7f3a9c1e5b2d4068"
CANARY_PROMPT = "canary-prompt-3b9d1f0e Zebra Quartz Umbrella"
SCHEDULE = "nightly-sim"
RELAXED = {
    "max_loop_lag_p99_ms": 10_000.0,
    "max_dispatch_delay_p99_ms": 10_000.0,
    "max_cpu_percent": 10_000.0,
}  # a shared 2-core test box: validity is not under test


def _spec(name: str, base_url: str, load: dict[str, Any], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "target": {
            "api": "openai-chat",
            "base_url": base_url,
            "model": "sim-fixed",
            "api_key_env": CANARY_KEY_ENV,
        },
        "workload": {"prompt_tokens": 64, "output_tokens": 24, "seed": 3},
        "load": load,
        "labels": {"model": "sim-fixed", "engine": "peakload-sim", "hardware": "cpu-test"},
        "validity": RELAXED,
    }
    spec.update(extra)
    return spec


def make_runs(database_url: str, workdir: Path) -> dict[str, str]:
    """Run the four kinds against simulated engines; returns kind -> run_id."""
    os.environ[CANARY_KEY_ENV] = CANARY_KEY
    dataset = workdir / "prompts.jsonl"
    dataset.write_text(
        "\n".join(
            json.dumps({"prompt": f"{CANARY_PROMPT} #{i}", "output_tokens": 24}) for i in range(8)
        )
        + "\n"
    )
    out: dict[str, str] = {}
    with start_sim(["--preset", "fixed", "--ttft-ms", "40", "--itl-ms", "8"], workdir) as sim:
        sweep = _spec(
            "ui-sweep",
            sim.base_url,
            {"concurrency": [1, 4], "duration_s": 2.5},
            slos=[{"metric": "ttft_ms", "percentile": 90, "threshold": 500}],
        )
        sweep["workload"] = {"dataset": str(dataset), "seed": 3}
        sweep["target"]["metrics_url"] = sim.base_url.removesuffix("/v1") + "/metrics"
        out["sweep"] = run_local(
            spec_from_dict(sweep), database_url=database_url, schedule_name=SCHEDULE
        ).run_id
        regions = _spec(
            "ui-regions",
            sim.base_url,
            {"rate": [12.0], "duration_s": 3, "arrival": "constant"},
            regions=[
                {"name": "eu-west", "share": 0.34},
                {"name": "us-east", "share": 0.33},
                {"name": "ap-south", "share": 0.33},
            ],
            cost={"gpu_hourly_usd": 3.0},
        )
        out["regions"] = run_local(
            spec_from_dict(regions), database_url=database_url, schedule_name=SCHEDULE
        ).run_id
        invalid = _spec("ui-invalid", sim.base_url, {"concurrency": [2], "duration_s": 2})
        invalid["validity"] = {"max_loop_lag_p99_ms": 0.0001, "max_dispatch_delay_p99_ms": 0.0001}
        out["invalid"] = run_local(spec_from_dict(invalid), database_url=database_url).run_id
    faults = [
        "--preset",
        "fixed",
        "--ttft-ms",
        "30",
        "--itl-ms",
        "6",
        "--seed",
        "5",
        "--rate-limit-rps",
        "6",
    ]
    with start_sim(faults, workdir) as sim:
        failing = _spec("ui-failures", sim.base_url, {"concurrency": [4], "duration_s": 2.5})
        # the canary also as a header value and a query parameter (S1: secret unless declared)
        failing["target"]["headers"] = {"X-Auth-Token": CANARY_KEY}
        failing["target"]["base_url"] = f"{sim.base_url}?pwd={CANARY_KEY}"
        out["failures"] = run_local(
            spec_from_dict(failing), database_url=database_url, schedule_name=SCHEDULE
        ).run_id
    return out
