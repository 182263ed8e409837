"""`compare` shows the cost change (analysis.reports.cost.cost_change) beside its verdict, from a
real store: the same load at twice the hourly price costs twice as much per million output
tokens; per-token runs keep their prices; the verdict and exit code are untouched by cost."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from tests.analysis.storedata import insert_run, level_row, run_row, streamed
from ui.commands.compare import compare_command

pytestmark = pytest.mark.integration


def _run(conn: psycopg.Connection[Any], rid: str, name: str, cost: dict[str, Any]) -> None:
    reqs = [
        streamed(
            rid,
            i,
            sent_ns=0,
            offsets_us=[50_000, 60_000],
            tokens=[5, 5],
            http_status=200,
            phase="steady",
        )
        for i in range(100)
    ]
    spec = {"name": name, "slos": [], "cost": cost}
    insert_run(conn, run_row(rid, name=name, spec=spec), [level_row(rid)], reqs)


def test_compare_shows_the_cost_change(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(pg_conn, "00000000-0000-0000-0014-000000000001", "cost-a", {"gpu_hourly_usd": 2.0})
    _run(pg_conn, "00000000-0000-0000-0014-000000000002", "cost-b", {"gpu_hourly_usd": 4.0})
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", pg_conn.peakload_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    res = runner.invoke(compare_command, ["cost-a", "cost-b", "--json"])
    assert res.exit_code == 0, res.output  # same latencies: cost never makes a regression
    cost = json.loads(res.output)["cost"]
    # 100 requests x 10 tokens in a 10 s window = 100 tokens/s = 0.36 M tokens/h
    (row,) = cost["levels"]
    assert row["baseline_usd_per_mtok_output"] == pytest.approx(2.0 / 0.36)
    assert row["candidate_usd_per_mtok_output"] == pytest.approx(4.0 / 0.36)
    assert row["change_pct"] == pytest.approx(100.0)
    # the run rows last 60 s: 2 USD/h x 60 s = 0.0333 USD
    assert cost["baseline"]["total_usd"] == pytest.approx(2.0 / 60)
    text = runner.invoke(compare_command, ["cost-a", "cost-b"]).output
    assert "Cost: baseline self-hosted" in text and "+100.0%" in text
