"""`peakload import vllm` on `vllm bench serve --save-result --save-detailed` output made by vLLM
0.32.0 against the simulated engine (fixtures/README.md): the stored run's percentiles are vLLM's
own, its failures are records, and every command reads it."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest

from tests.workers.imports.conftest import FIXTURES, Invoke, report_of, run_id_of

pytestmark = pytest.mark.integration

VLLM = FIXTURES / "vllm-bench-serve.json"


def test_vllm_percentiles_are_vllms_own(peakload: Invoke, import_url: str) -> None:
    doc = json.loads(VLLM.read_text())
    result = peakload(
        "import", "vllm", str(VLLM), "--label", "team=perf", "--tool-version", "0.32.0"
    )
    run_id = run_id_of(result)
    assert "imported 40 requests from vllm 0.32.0" in result.output
    report = report_of(import_url, run_id)
    (level,) = report["summary"]["levels"]
    assert (level["kind"], level["value"]) == ("rate", 20.0)
    assert level["requests_ok"] == doc["completed"] == 35
    assert level["requests_failed"] == doc["failed"] == 5
    assert level["failures_by_kind"] == {"http_503": 5}
    # vLLM's own figures: np.percentile (linear) over its successful requests, as peakload's
    # µs chunk offsets round each gap by at most 1 µs
    assert level["ttft_ms"]["p99"] == pytest.approx(doc["p99_ttft_ms"], abs=1e-4)
    assert level["tpot_ms"]["p99"] == pytest.approx(doc["p99_tpot_ms"], abs=1e-4)
    assert level["itl_ms"]["p99"] == pytest.approx(doc["p99_itl_ms"], abs=2e-3)
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    gaps = [g * 1e3 for i in ok for g in doc["itls"][i]]
    assert level["samples"]["itl_ms"] == len(gaps)
    assert level["itl_ms"]["p50"] == pytest.approx(doc["median_itl_ms"], abs=2e-3)
    assert level["ttft_ms"]["p50"] == pytest.approx(doc["median_ttft_ms"], abs=1e-4)
    e2e = np.array([doc["latencies"][i] * 1e3 for i in ok])
    assert level["e2e_ms"]["p90"] == pytest.approx(np.percentile(e2e, 90), abs=1e-4)
    # scheduled = send - vLLM's client queue wait (all but zero without --max-concurrency)
    assert level["ttft_sched_ms"]["p50"] >= level["ttft_ms"]["p50"]
    with psycopg.connect(import_url) as conn:
        labels, spec, status, valid = conn.execute(
            "SELECT labels, spec, status, valid FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()  # type: ignore[misc]
        chunks = conn.execute(
            "SELECT cardinality(chunk_offsets_us), output_tokens, http_status FROM requests "
            "WHERE run_id = %s ORDER BY idx",
            (run_id,),
        ).fetchall()
    assert labels["load_driver"] == "vllm" and labels["load_driver_version"] == "0.32.0"
    assert labels["team"] == "perf"
    assert spec["load"]["rate"] == [20.0] and spec["load"]["arrival"] == "poisson"
    assert spec["workload"]["prompt_tokens"]["value"] == 32
    assert (status, valid) == ("completed", True)
    assert [c[0] for c in chunks if c[2] is None] == [len(doc["itls"][i]) + 1 for i in ok]
    assert sorted({c[2] for c in chunks if c[2] is not None}) == [503]
    # what the report prints about the import
    text = peakload("report", run_id).output
    assert "imported from vllm 0.32.0" in text
    assert "not recorded: target URL: not in the file (give --base-url)" in text
