"""`peakload import guidellm` on a `benchmarks.json` made by GuideLLM 0.8.1 against the simulated
engine (fixtures/README.md): a two-level sweep (1 and 4 streams) whose stored TTFT and latency
give GuideLLM's own percentiles by GuideLLM's own rule, whose 503 is a record, and whose levels
every command reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psycopg
import pytest

from analysis.metrics import e2e_ms, ttft_ms
from analysis.store.load import load_requests
from tests.workers.imports.conftest import FIXTURES, Invoke, report_of, run_id_of

pytestmark = pytest.mark.integration

GUIDELLM = FIXTURES / "guidellm-benchmarks.json"


def guidellm_percentile(values: np.ndarray, p: float) -> float:
    """GuideLLM's rule (schemas/base/statistics.py Percentiles.from_pdf): the smallest sorted
    value whose cumulative probability (equal weights, np.cumsum) reaches p."""
    v = np.sort(values)
    cdf = np.cumsum(np.full(v.size, 1.0 / v.size))
    return float(v[np.searchsorted(cdf, p, side="left")])


def test_guidellm_sweep_percentiles_are_guidellms_own(
    peakload: Invoke, import_url: str, tmp_path: Path
) -> None:
    doc = json.loads(GUIDELLM.read_text())
    run_id = run_id_of(peakload("import", "guidellm", str(GUIDELLM)))
    report = report_of(import_url, run_id)
    levels = report["summary"]["levels"]
    assert [(lv["kind"], lv["value"]) for lv in levels] == [
        ("concurrency", 1.0),
        ("concurrency", 4.0),
    ]
    assert levels[0]["failures_by_kind"] == {"http_503": 1}
    with psycopg.connect(import_url) as conn:
        df = load_requests(conn, run_id)
    for lv, bench in zip(levels, doc["benchmarks"], strict=True):
        ok = df[(df["level"] == lv["level"]) & (df["outcome"] == "ok")]
        assert len(ok) == len(bench["requests"]["successful"]) == lv["requests_ok"]
        m = bench["metrics"]
        theirs_ttft = m["time_to_first_token_ms"]["successful"]
        theirs_e2e = m["request_latency"]["successful"]
        for key, q in (("p25", 0.25), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            ours = guidellm_percentile(ttft_ms(ok), q)
            assert ours == pytest.approx(theirs_ttft["percentiles"][key], abs=1e-3), key
            ours = guidellm_percentile(e2e_ms(ok) / 1e3, q)
            assert ours == pytest.approx(theirs_e2e["percentiles"][key], abs=1e-6), key
        assert float(np.mean(ttft_ms(ok))) == pytest.approx(theirs_ttft["mean"], abs=1e-3)
        # the report's own percentiles (linear) come from the same samples
        lo, hi = theirs_ttft["min"], theirs_ttft["max"]
        assert lo - 1e-3 <= lv["ttft_ms"]["p50"] <= hi + 1e-3
        assert lv["samples"]["itl_ms"] == 0  # GuideLLM keeps no per-token times
    notes = report["imported"]
    assert notes["tool"] == "guidellm" and notes["tool_version"] == "0.8.1"
    assert notes["latency_from"] == "scheduled"
    assert any("per-token arrival times" in m for m in notes["missing"])
    html, png = tmp_path / "r.html", tmp_path / "png"
    rendered = peakload("report", run_id, "--html", str(html), "--png-dir", str(png))
    assert rendered.exit_code == 0, rendered.output  # no ITL samples: that figure is left out
    assert "Imported results" in html.read_text() and "percentiles_itl_ms.png" not in {
        p.name for p in png.iterdir()
    }
    out = tmp_path / "r.csv"
    exported = peakload("export", run_id, "--format", "csv", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    assert len(out.read_text().splitlines()) == 1 + len(df)
