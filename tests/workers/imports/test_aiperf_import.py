"""`peakload import aiperf` on an artifacts folder made by AIPerf 0.13.0 against the simulated
engine (fixtures/README.md): the stored run's percentiles are AIPerf's own summary's, its 503s are
records, its scheduled times are AIPerf's credits, and `compare` judges it against another run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.results.storeformat import DATABASE_ENV
from tests.cli.test_run_command import LOOSE_VALIDITY
from tests.support.sim import ROOT, SimProcess
from tests.workers.imports.conftest import FIXTURES, Invoke, report_of, run_id_of

pytestmark = pytest.mark.integration

AIPERF = FIXTURES / "aiperf"
# peakload's metric <- AIPerf's summary metric (both from the send unless named _sched)
SAME = {
    "ttft_ms": "time_to_first_token",
    "tpot_ms": "inter_token_latency",  # AIPerf's per-request (latency - ttft) / (osl - 1)
    "e2e_ms": "request_latency",
    "output_speed_tps": "output_token_throughput_per_user",
}


def test_aiperf_percentiles_are_aiperfs_own(peakload: Invoke, import_url: str) -> None:
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    run_id = run_id_of(peakload("import", "aiperf", str(AIPERF)))
    (level,) = report_of(import_url, run_id)["summary"]["levels"]
    assert (level["kind"], level["value"]) == ("concurrency", 4.0)
    assert level["requests_ok"] == summary["request_count"]["avg"] == 36
    assert level["requests_failed"] == summary["error_request_count"]["avg"] == 4
    assert level["failures_by_kind"] == {"http_503": 4}
    for ours, theirs in SAME.items():
        for p in ("p50", "p90", "p99"):
            assert level[ours][p] == pytest.approx(summary[theirs][p], rel=1e-6, abs=1e-5), (
                ours,
                p,
            )
    # per-token gaps: AIPerf's inter_chunk_latency over every chunk (one token each here)
    icl = summary["inter_chunk_latency"]
    assert level["samples"]["itl_ms"] == icl["count"]
    for p in ("p50", "p90", "p99"):
        assert level["itl_ms"][p] == pytest.approx(icl[p], abs=2e-3)
    assert level["ttft_sched_ms"]["p50"] >= level["ttft_ms"]["p50"]  # from the credit


@pytest.mark.slow  # a real peakload run (about 10 s alone; 33 s on this loaded 2-core host)
def test_compare_a_peakload_run_with_an_aiperf_import(
    peakload: Invoke, import_url: str, sim: SimProcess, tmp_path: Path
) -> None:
    """A run peakload measured (concurrency 4 against the simulated engine) and AIPerf's import
    (concurrency 4) are paired by load; `compare` judges every metric both have, says which
    labels differ (the load driver), and exits 0 or 1 (a verdict), never 7."""
    spec = tmp_path / "c4.toml"
    spec.write_text(
        f"""name = "peakload-c4"
[target]
api = "openai-chat"
base_url = "{sim.base_url}"
model = "m"
[workload]
prompt_tokens = 32
output_tokens = 16
[load]
concurrency = [4]
duration_s = 2
{LOOSE_VALIDITY}""",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "ui", "run", str(spec), "--no-probe"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            DATABASE_ENV: import_url,
            "PEAKLOAD_HOME": str(tmp_path / "home"),
            "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "1",
        },
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert "run " in done.stdout and " completed" in done.stdout, done.stdout + done.stderr
    cand = run_id_of(peakload("import", "aiperf", str(AIPERF)))
    out = peakload("compare", "peakload-c4", cand)
    assert out.exit_code in (0, 1), out.output
    assert "labels.load_driver differs: baseline None, candidate 'aiperf'" in out.output
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "error_rate"):
        assert f"{metric}" in out.output and "concurrency 4" in out.output
    two = peakload("compare", cand, cand)
    assert two.exit_code == 0, two.output
    listed = peakload("runs", "--format", "plain")
    assert "load_driver=aiperf" in listed.output and "peakload-c4" in listed.output
