"""`peakload sla` and `peakload runs` against a real store (PEAKLOAD_DATABASE_URL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from tests.analysis.storedata import insert_run, level_row, run_row, streamed
from ui.commands.runs import runs_command
from ui.commands.sla import sla_command

RUN = "00000000-0000-0000-0000-0000000000d1"


def _store(conn: psycopg.Connection[Any], n: int) -> None:
    reqs = [
        streamed(RUN, i, sent_ns=0, offsets_us=[100_000, 120_000], tokens=[1, 1]) for i in range(n)
    ]
    insert_run(
        conn,
        run_row(RUN, name="nightly-a", labels={"engine": "sim"}),
        [level_row(RUN, duration_s=n / 10)],  # 10 req/s, 100 ms apart: the window holds them
        reqs,
    )


@pytest.fixture
def env(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> psycopg.Connection[Any]:
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", pg_conn.peakload_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("COLUMNS", "220")  # rich wraps tables at 80 columns otherwise
    return pg_conn


def _claims(tmp_path: Path, threshold: float, percentile: float = 99) -> str:
    p = tmp_path / "claims.toml"
    p.write_text(
        f'[[claims]]\nmetric = "ttft_ms"\npercentile = {percentile}\nthreshold = {threshold}\n'
    )
    return str(p)


@pytest.mark.integration
def test_sla_exit_codes(env: psycopg.Connection[Any], tmp_path: Path) -> None:
    _store(env, 460)
    runner = CliRunner()
    ok = runner.invoke(sla_command, [RUN[:8], "--claims", _claims(tmp_path, 800)])
    assert ok.exit_code == 0, ok.output
    assert "pass" in ok.output
    bad = runner.invoke(sla_command, ["nightly-a", "--claims", _claims(tmp_path, 50), "--json"])
    assert bad.exit_code == 1
    out = json.loads(bad.output)
    assert out["verdicts"][0]["verdict"] == "fail" and out["verdicts"][0]["n"] == 460
    # p99.9 with 460 samples cannot pass yet
    few = runner.invoke(sla_command, [RUN, "--claims", _claims(tmp_path, 800, 99.9)])
    assert few.exit_code == 3 and "insufficient" in few.output
    missing = runner.invoke(sla_command, ["no-such-run", "--claims", _claims(tmp_path, 800)])
    assert missing.exit_code == 6 and "no run matches 'no-such-run'" in missing.output
    (tmp_path / "bad.toml").write_text("[[claims]]\nmetric = 1\n")
    bad_file = runner.invoke(sla_command, [RUN, "--claims", str(tmp_path / "bad.toml")])
    assert bad_file.exit_code == 2 and "bad.toml" in bad_file.output


@pytest.mark.integration
def test_runs_list(env: psycopg.Connection[Any]) -> None:
    _store(env, 3)
    runner = CliRunner()
    res = runner.invoke(runs_command, ["--json", "--label", "engine=sim"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output.splitlines()[0])
    assert row["run_id"] == RUN and row["requests"] == 3 and row["errors"] == 0
    assert row["valid"] is True and row["duration_s"] == 60.0
    none = runner.invoke(runs_command, ["--json", "--label", "engine=vllm"])
    assert none.exit_code == 0 and none.output == ""
    table = runner.invoke(runs_command, [])
    assert "nightly-a" in table.output and RUN[:8] in table.output
