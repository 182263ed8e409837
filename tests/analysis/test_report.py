"""Reports from a real store: a run with failures (invalid), one region, a sweep, a reasoning
model; self-contained HTML, JSON with the numbers, PNGs; never content."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs

from analysis.reports import figures, render
from analysis.reports.report import build_report
from analysis.verdicts import sla
from tests.analysis.storedata import insert_run, synthetic_run
from ui.commands.report import report_command

CANARY = "CANARY-PROMPT-9c1d"


def _check_html(html: str) -> None:
    assert html.startswith("<!doctype html>")
    # self-contained: plotly.js inlined; nothing loaded from elsewhere (plotly.js itself only
    # names a topojson URL used by geo maps, which the report never draws)
    assert get_plotlyjs() in html
    rest = html.replace(get_plotlyjs(), "")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", rest)
    assert "cdn." not in rest and "<script src" not in rest
    assert "<link" not in html and CANARY not in html and "CANARY-RESPONSE" not in html


@pytest.mark.integration
def test_failures_and_invalid(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    rid = "00000000-0000-0000-0000-0000000000b1"
    insert_run(
        pg_conn,
        *synthetic_run(
            rid,
            regions=("eu", "us"),
            fail_every=5,
            run_over={
                "valid": False,
                "invalid_reasons": ["event-loop lag p99 4.2 ms > 2 ms"],
                "store_content": True,
            },
        ),
    )
    claims = sla.parse_claims(
        {"claims": [{"metric": "ttft_ms", "percentile": 50, "threshold": 1000}]}
    )
    rep = build_report(pg_conn, rid, claims=claims, resamples=100)
    text = json.dumps(rep)
    assert CANARY not in text
    assert (
        rep["error_rates"]["http_503"]["count"] + rep["error_rates"]["stream_error"]["count"] == 12
    )
    lvl = rep["summary"]["levels"][0]
    assert lvl["requests_failed"] == 12 and lvl["requests_ok"] == 48
    assert set(lvl["regions"]) == {"eu", "us"}
    assert {c["region"] for c in rep["curves"]} == {"all", "eu", "us"}
    assert rep["sla"][0]["n"] == 48 + 12  # sent failures count as exceedances
    html = render.render_html(rep)
    _check_html(html)
    body = html.split("<body>", 1)[1]
    assert body.startswith("<div class='banner'>INVALID RUN") and "event-loop lag" in body
    assert rep["verdict"]["exit_code"] == 4 and "INVALID</b> (exit 4" in body
    pngs = figures.write_pngs(rep, tmp_path / "png")
    assert len(pngs) >= 6
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.integration
def test_one_region_sweep_and_cli(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = "00000000-0000-0000-0000-0000000000b2"
    slos = [{"metric": "ttft_ms", "percentile": 50, "threshold": 70}]
    insert_run(
        pg_conn,
        *synthetic_run(
            rid,
            levels=(("rate", 2.0), ("rate", 4.0), ("rate", 8.0), ("rate", 16.0)),
            run_over={"spec": {"name": "sweep", "slos": slos}},
        ),
    )
    rep = build_report(pg_conn, rid, resamples=100)
    pts = rep["frontier"]["points"]
    assert [p["value"] for p in pts] == [2.0, 4.0, 8.0, 16.0]
    lat = [p["latency"] for p in pts]
    assert lat == sorted(lat)  # latency grows with the level by construction
    assert {c["region"] for c in rep["curves"]} == {"all"}
    assert {r["region"] for r in rep["timeseries"]["rows"]} == {"local"}
    best = rep["frontier"]["max_load_meeting_slos"]
    assert best is not None and [lv["value"] for lv in best["levels"]] == [2.0, 4.0, 8.0, 16.0]
    html = render.render_html(rep)
    assert "<div class='banner'>" not in html
    # the run against its own spec, as `peakload run` exited: its SLO at each of the 4 loads
    v = rep["verdict"]
    assert v["loads"] == 4 and [c["claim"] for c in v["criteria"][:4]] == [
        f"p50 ttft_ms < 70 @ level {i}: rate {r:g}" for i, r in enumerate((2, 4, 8, 16))
    ]
    assert "<h2>Verdict against the run's spec</h2>" in html
    assert html_escape(v["reason"]) in html and f"(exit {v['exit_code']}," in html

    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", pg_conn.peakload_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("COLUMNS", "220")
    out = tmp_path / "r.html"
    js = tmp_path / "r.json"
    res = CliRunner().invoke(report_command, [rid[:8], "--html", str(out), "--json", str(js)])
    assert res.exit_code == 0, res.output
    assert "TTFT" in res.output and out.stat().st_size > 1_000_000  # plotly.js inlined
    _check_html(out.read_text())
    assert json.loads(js.read_text())["summary"]["run_id"] == rid


@pytest.mark.integration
def test_reasoning_model(pg_conn: psycopg.Connection[Any]) -> None:
    rid = "00000000-0000-0000-0000-0000000000b3"
    insert_run(pg_conn, *synthetic_run(rid, reasoning=True, per_level=40))
    rep = build_report(pg_conn, rid, resamples=100)
    lvl = rep["summary"]["levels"][0]
    # the first answer token comes 200 ms after the first (reasoning) token, by construction
    for p in ("p50", "p90", "p99"):
        assert lvl["ttfat_ms"][p] == pytest.approx(lvl["ttft_ms"][p] + 200.0, abs=1e-6)
    assert rep["token_agreement"]["exact_fraction"] == 1.0
    tl = rep["timeline"]
    assert len(tl) == 40 and all(r["chunk_s"] for r in tl)
