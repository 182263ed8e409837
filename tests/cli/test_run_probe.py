"""`peakload run` probes the spec's own parameters first: a parameter the target rejects
refuses the run (exit 2, the server's error named, nothing written); otherwise the probe is
stored with the run and shown by `peakload report`."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.cli.test_run_command import LOOSE_VALIDITY, count_runs, peakload, spec_text
from tests.support.sim import start_sim

pytestmark = [pytest.mark.integration, pytest.mark.one_store]  # tests/support/stores.py
FAST = ["--preset", "fixed", "--ttft-ms", "2", "--itl-ms", "1"]


def test_rejected_parameter_refuses_the_run(store_url: str, tmp_path: Path) -> None:
    with start_sim([*FAST, "--param", "seed=reject"]) as sim:
        spec = tmp_path / "s.toml"
        spec.write_text(spec_text(sim.base_url, extra_body="{ seed = 3 }"))
        r = peakload(["run", str(spec), "--quiet"], store_url, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "rejects parameter(s) this spec sends" in r.stderr
    assert "seed: unsupported parameter: seed" in r.stderr
    assert count_runs(store_url) == 0


def test_probe_is_stored_with_the_run_and_reported(store_url: str, tmp_path: Path) -> None:
    with start_sim([*FAST, "--param", "seed=honour"]) as sim:
        spec = tmp_path / "s.toml"
        spec.write_text(spec_text(sim.base_url, extra_body="{ seed = 3, foo = 1 }"))
        r = peakload(["run", str(spec), "--quiet"], store_url, tmp_path)
        assert r.returncode not in (2, 5), r.stderr  # it ran (its verdict is the machine's)
    with psycopg.connect(store_url) as conn:
        row = conn.execute("SELECT run_id::text, result FROM run_probes").fetchone()
    assert row is not None
    verdicts = {v["param"]: v["verdict"] for v in row[1]["verdicts"]}
    honoured = dict.fromkeys(["stream", "include_usage", "max_tokens", "seed"], "honoured")
    assert verdicts == {**honoured, "foo": "accepted"}
    out = tmp_path / "report.json"
    r = peakload(["report", row[0], "--json", str(out)], store_url, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "parameter probe" in r.stdout
    assert json.loads(out.read_text())["probe"]["verdicts"][3]["param"] == "seed"


def test_structured_output_failures_are_counted(store_url: str, tmp_path: Path) -> None:
    """A workload asking for JSON from a server that ignores the schema: the probe says
    ignored, the run goes ahead and every answer counts as a schema failure in the report."""
    schema = '{ type = "object", properties = { answer = { type = "string" } } }'
    with start_sim([*FAST, "--param", "response_format=ignore"]) as sim:
        spec = tmp_path / "s.toml"
        text = spec_text(sim.base_url, stream="false")
        spec.write_text(
            text.replace("[load]", f"[workload.output]\njson_schema = {schema}\n[load]")
            + LOOSE_VALIDITY
        )
        r = peakload(["run", str(spec), "--quiet"], store_url, tmp_path)
        assert r.returncode == 1, r.stderr  # failed: the schema failures (validity bounds far off)
    with psycopg.connect(store_url) as conn:
        run_id, probe = conn.execute("SELECT run_id::text, result FROM run_probes").fetchone()
        phases = conn.execute(
            "SELECT DISTINCT outcome, error_phase FROM requests WHERE run_id = %s", (run_id,)
        ).fetchall()
    assert {v["param"]: v["verdict"] for v in probe["verdicts"]}["response_format"] == "ignored"
    assert phases == [("stream_error", "schema")]
    out = tmp_path / "report.json"
    assert peakload(["report", run_id, "--json", str(out)], store_url, tmp_path).returncode == 0
    assert json.loads(out.read_text())["error_rates"]["stream_error:schema"]["rate"] == 1.0
