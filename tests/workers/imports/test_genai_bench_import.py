"""`peakload import genai-bench` on an experiment folder made by genai-bench 0.0.5 against the
simulated engine (fixtures/README.md): per-request TTFT, TPOT and E2E give genai-bench's own
percentiles, its 503s are records, and the missing send times are said, not made up."""

from __future__ import annotations

import json

import pytest

from tests.workers.imports.conftest import FIXTURES, Invoke, report_of, run_id_of

pytestmark = pytest.mark.integration

FOLDER = FIXTURES / "genai-bench"
SAME = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2e_latency"}


def test_genai_bench_percentiles_are_its_own(peakload: Invoke, import_url: str) -> None:
    (scenario,) = [p for p in FOLDER.glob("*.json") if p.name != "experiment_metadata.json"]
    agg = json.loads(scenario.read_text())["aggregated_metrics"]
    run_id = run_id_of(peakload("import", "genai-bench", str(FOLDER)))
    report = report_of(import_url, run_id)
    (level,) = report["summary"]["levels"]
    assert (level["kind"], level["value"]) == ("concurrency", 2.0)
    assert level["requests_ok"] == agg["num_completed_requests"] == 35
    assert level["failures_by_kind"] == {"http_503": agg["error_codes_frequency"]["503"]}
    for ours, theirs in SAME.items():
        for p in ("p50", "p90", "p99"):
            assert level[ours][p] == pytest.approx(agg["stats"][theirs][p] * 1e3, abs=1e-4)
    # its requests/s: completed over run_duration, the scenario's span
    assert level["request_rate"] == pytest.approx(agg["requests_per_second"], rel=1e-3)
    assert level["output_tokens_per_s"] is None  # no arrival times: unknown, not zero
    assert level["samples"]["itl_ms"] == 0
    notes = report["imported"]
    assert notes["tool_version"] == "0.0.5" and notes["latency_from"] == "send"
    assert any(m.startswith("send times: genai-bench records none") for m in notes["missing"])
    assert "REDACTED" in notes["config"]["cmd"] and "dummy" not in notes["config"]["cmd"]
