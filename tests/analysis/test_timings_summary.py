"""Connections, re-sends and client vs server in the summary (`run --json`), its tables and the
HTML report, from a synthetic run stored in a real store; every number worked out by hand."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest
from rich.console import Console

from analysis import metrics as m
from analysis.reports import render
from analysis.reports.report import build_report
from analysis.reports.summary import summarize_run
from analysis.reports.summary_table import render_client_vs_server_table, render_summary_table
from tests.analysis.storedata import insert_run, level_row, run_row, timed_requests

RUN = "00000000-0000-0000-0000-0000000010a1"
PLAIN = "00000000-0000-0000-0000-0000000010a2"


def _store(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        levels = [level_row(RUN, lvl) for lvl in range(3)]
        insert_run(conn, run_row(RUN), levels, timed_requests(RUN))
        # the second run: no server timings anywhere (as most APIs give), no re-sends
        insert_run(conn, run_row(PLAIN), [level_row(PLAIN, 1)], timed_requests(PLAIN)[5:7])


def _check(s: dict[str, Any]) -> None:
    assert s["server_timings"] is True and s["resent"] == 1
    l0, l1, l2 = s["levels"]
    assert l0["connections"] == {
        "recorded": 5,
        "new_share": 3 / 5,
        "opened": 3,
        # 2, 4, 6 ms: p90 = 4 + 0.8 * 2, p99 = 4 + 0.98 * 2
        "connect_ms": pytest.approx({"p50": 4.0, "p90": 5.6, "p99": 5.96}),
        "resent": 1,
    }
    # client ITL over all four: 10 10 20 20 20 30 30 60 60 60 60 -> p50 30; over the three the
    # server timed per token: 10 10 20 20 20 30 30 -> p50 20
    assert l0["itl_ms"]["p50"] == 30.0
    assert l0["client_vs_server"] == {
        "ttft_n": 3,
        "client_ttft_p50_ms": 200.0,  # 100 200 300
        "server_prefill_p50_ms": 150.0,  # 85 150 260
        "ttft_gap_ms": 50.0,
        "itl_n": 3,
        "client_itl_samples": 7,
        "client_itl_p50_ms": 20.0,
        "server_itl_p50_ms": 18.0,  # 18 28 8
        "itl_gap_ms": 2.0,
    }
    eu, us = l0["regions"]["eu"], l0["regions"]["us"]
    assert eu["connections"]["new_share"] == pytest.approx(2 / 3)
    assert eu["connections"]["connect_ms"]["p50"] == 4.0 and eu["connections"]["resent"] == 1
    assert eu["client_vs_server"] == {
        "ttft_n": 2,
        "client_ttft_p50_ms": 150.0,
        "server_prefill_p50_ms": 117.5,
        "ttft_gap_ms": 32.5,
        "itl_n": 2,
        "client_itl_samples": 5,
        "client_itl_p50_ms": 20.0,
        "server_itl_p50_ms": 23.0,
        "itl_gap_ms": -3.0,
    }
    assert us["connections"]["new_share"] == 0.5 and us["connections"]["resent"] == 0
    assert us["client_vs_server"]["client_ttft_p50_ms"] == 300.0
    assert us["client_vs_server"]["server_prefill_p50_ms"] == 260.0
    assert us["client_vs_server"]["client_itl_p50_ms"] == 10.0
    assert us["client_vs_server"]["server_itl_p50_ms"] == 8.0
    assert l1["connections"]["new_share"] == 0.0 and l1["connections"]["opened"] == 0
    assert l1["connections"]["connect_ms"]["p50"] is None and l1["client_vs_server"] is None
    assert l2["connections"] == {
        "recorded": 0,
        "new_share": None,
        "opened": 0,
        "connect_ms": {"p50": None, "p90": None, "p99": None},
        "resent": None,
    }


def _text(table: Any) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return " ".join(console.export_text().split())


def _row(cells: str, table: str) -> bool:
    """A table row with these cells in order (between rich's column rules)."""
    return re.search(r" │ ".join(map(re.escape, cells.split())), table) is not None


@pytest.mark.integration
def test_summary_and_report_numbers_by_hand(store_url: str, tmp_path: Path) -> None:
    _store(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        summary = summarize_run(conn, RUN)  # the `run --json` path: the int[] rows
        report = build_report(conn, RUN, resamples=10)  # analysis.store.fastload
        plain = summarize_run(conn, PLAIN)
    _check(summary)
    _check(report["summary"])
    table = _text(render_summary_table(summary))
    assert "60.0% · 4.00 / 5.96" in table and "re-sent on a new connection: 1 in the run" in table
    server = _text(render_client_vs_server_table(summary))
    assert "client vs server" in server
    assert _row("0 all 200.00 150.00 50.00 20.00 18.00 2.00 3", server)
    assert _row("0 eu 150.00 117.50 32.50 20.00 23.00 -3.00 2", server)
    html = render.render_html(report)
    assert "<h2>Client vs server</h2>" in html
    assert "<td>117.50</td><td>32.50</td>" in html and "<td>60.0% · 4.00 / 5.96</td>" in html
    # a run whose server reported no timings: no such panel, connections still shown
    assert plain["server_timings"] is False and plain["resent"] == 0
    assert all(lv["client_vs_server"] is None for lv in plain["levels"])
    assert render_client_vs_server_table(plain) is None
    with psycopg.connect(store_url, autocommit=True) as conn:
        plain_report = build_report(conn, PLAIN, resamples=10)
    assert "Client vs server" not in render.render_html(plain_report)


def test_server_formulas_at_their_edges() -> None:
    df = pd.DataFrame(
        {
            "sent_ns": [0.0, 0.0, np.nan, 0.0],
            "resent": [0.0, np.nan, 0.0, 2.0],
            "connect_ns": [1.5e6, np.nan, np.nan, np.nan],
            "server_prefill_ms": [10.0, 20.0, np.nan, 5.0],
            "server_queue_ms": [np.nan, 2.5, 1.0, np.nan],
            "server_decode_tokens": [0.0, 4.0, 1.0, 2.0],
            "server_decode_ms": [3.0, 7.5, 1.0, np.nan],
        }
    )
    # decode time over the gaps (4 tokens: 3); none for fewer than two tokens or a missing
    # half; no queue counts as 0
    assert m.server_itl_ms(df).tolist()[1] == 2.5
    assert np.isnan(m.server_itl_ms(df)[[0, 2, 3]]).all()
    assert m.server_prefill_ms(df).tolist()[:2] == [10.0, 22.5]
    assert np.isnan(m.server_prefill_ms(df)[2])
    # not sent (row 2) and not on record (row 1) are left out of the share; re-sends summed
    assert m.new_connection_share(df) == 0.5 and m.resent_total(df) == 2
    assert m.connect_ms(df).tolist()[0] == 1.5
    # a frame from before deploy/sql/0120 has none of the columns: nothing on record
    old = df[["sent_ns"]]
    assert m.new_connection_share(old) is None and m.resent_total(old) is None
    assert np.isnan(m.server_prefill_ms(old)).all()
    nan = np.full(3, np.nan)
    assert m.client_vs_server(np.array([1.0, 2.0, 3.0]), nan, (5.0, 10), nan) is None
