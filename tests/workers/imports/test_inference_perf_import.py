"""`peakload import inference-perf` on a per-request report in inference-perf's documented format
(fixtures/make_inference_perf.py: the tool needs Python >= 3.12, absent here, so this file is
synthetic): per-token times become chunk arrivals, percentiles are numpy's over the file's own
values (inference-perf's summaries use np.percentile), and what the file lacks is said."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.workers.imports.conftest import FIXTURES, Invoke, report_of, run_id_of

pytestmark = pytest.mark.integration

FOLDER = FIXTURES / "inference-perf"


def test_inference_perf_per_token_times(peakload: Invoke, import_url: str) -> None:
    rows = json.loads((FOLDER / "per_request_lifecycle_metrics.json").read_text())
    ok = [r for r in rows if not r["error"]]
    result = peakload("import", "inference-perf", str(FOLDER), "--tool-version", "0.7.0")
    run_id = run_id_of(result)
    report = report_of(import_url, run_id)
    (level,) = report["summary"]["levels"]
    assert level["requests_ok"] == len(ok) == 28
    assert level["failures_by_kind"] == {"http_503": 2}
    times = [r["info"]["response_metrics"]["output_token_times"] for r in ok]
    ttft = np.array([t[0] - r["start_time"] for t, r in zip(times, ok, strict=True)]) * 1e3
    e2e = np.array([r["end_time"] - r["start_time"] for r in ok]) * 1e3
    gaps = np.concatenate([np.diff(t) for t in times]) * 1e3
    for p in (50, 90, 99):
        assert level["ttft_ms"][f"p{p}"] == pytest.approx(np.percentile(ttft, p), abs=2e-3)
        assert level["e2e_ms"][f"p{p}"] == pytest.approx(np.percentile(e2e, p), abs=1e-4)
        assert level["itl_ms"][f"p{p}"] == pytest.approx(np.percentile(gaps, p), abs=2e-3)
    assert level["samples"]["itl_ms"] == gaps.size
    notes = report["imported"]
    assert notes["tool_version"] == "0.7.0" and notes["latency_from"] == "send"
    assert any(
        m.startswith("scheduled times: latency from the send only") for m in notes["missing"]
    )
    assert any(
        m.startswith("the load: the per-request file names no stage") for m in notes["missing"]
    )
