"""Each page of the app, rendered by AppTest against a store holding real runs (a sweep, three
regions, failures, an invalid run): what it says, and that its numbers are the store's."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from tests.ui.conftest import UiStore, page_text
from tests.ui.stored_runs import CANARY_KEY, CANARY_PROMPT, SCHEDULE
from ui.cli import cli

Page = Callable[..., AppTest]


def figures(at: AppTest) -> list[dict[str, Any]]:
    """The plotly figures on the page, as their JSON specs."""
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


def trace_names(fig: dict[str, Any]) -> set[str]:
    return {str(t.get("name")) for t in fig["data"] if t.get("showlegend", True) is not False}


def count(url: str, query: str, *args: Any) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, args).fetchone()
    assert row is not None
    return int(row[0])


def test_runs_page_lists_and_filters_runs(app_page: Page, app_env: UiStore) -> None:
    at = app_page("runs")
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    names = set(table["name"])
    assert {"ui-sweep", "ui-regions", "ui-failures", "ui-invalid"} <= names
    row = table[table["name"] == "ui-failures"].iloc[0]
    assert row["errors"] == count(
        app_env.url,
        "SELECT count(*) FROM requests WHERE run_id = %s AND outcome <> 'ok'",
        app_env.ids["failures"],
    )
    assert row["errors"] > 0
    assert set(table.loc[table["name"] == "ui-invalid", "validity"]) == {"INVALID"}
    at.text_input(key="f_name").input("regions").run()
    assert list(at.dataframe[0].value["name"]) == ["ui-regions"]
    at.text_input(key="f_name").input("").run()
    at.text_input(key="f_label").input("hardware=cpu-test").run()
    assert {"ui-sweep", "ui-regions"} <= set(at.dataframe[0].value["name"])
    at.text_input(key="f_label").input("hardware=gpu").run()
    assert at.dataframe[0].value.empty


def test_run_page_of_a_sweep(app_page: Page, app_env: UiStore) -> None:
    rid = app_env.ids["sweep"]
    at = app_page("run", run=rid)
    text = page_text(at)
    assert at.title[0].value == "Run: ui-sweep"
    assert "Valid run" in text
    total = count(app_env.url, "SELECT count(*) FROM requests WHERE run_id = %s", rid)
    assert f"Requests: {total:,}" in text
    levels = at.dataframe[0].value
    assert list(levels["level"]) == [0, 1]
    assert levels["ok"].sum() + levels["failed"].sum() == total
    figs = figures(at)
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert any("percentiles by level" in t for t in titles)
    curve = figs[0]
    assert curve["layout"]["xaxis"]["type"] == "log"
    assert "p50" in curve["layout"]["xaxis"]["ticktext"]
    assert {"level 0", "level 1"} <= trace_names(curve)
    assert curve["layout"]["xaxis"]["ticktext"][1:5] == ["p50", "p90", "p99", "p99.9"]
    slices = next(f for f in figures(at) if "per 5 s window" in f["layout"]["title"]["text"])
    panels = [a["text"] for a in slices["layout"]["annotations"]]
    assert panels[:2] == ["TTFT from send per window (ms)", "requests per window"]
    assert "server queue / running" in panels  # the sweep scraped the sim's /metrics
    assert {"TTFT from send p50", "TTFT from send p99", "queue", "running"} <= trace_names(slices)
    timeline = next(f for f in figs if "Sampled requests" in f["layout"]["title"]["text"])
    marks = next(t for t in timeline["data"] if t["name"] == "chunk arrival")
    assert len(marks["x"]) > 0
    labels = at.dataframe[1 if len(at.dataframe) > 1 else 0].value
    assert "engine" in set(labels.get("label", []))
    assert at.get("download_button")


def test_run_page_keeps_the_summary_it_computed_and_reads_it_back(
    app_page: Page, app_env: UiStore
) -> None:
    """A finished run's summary is computed on its first view and kept in the store
    (analysis.store.summaries); the next server reads that row instead of the requests: a
    doctored count in it shows on the page."""
    import streamlit as st

    rid = app_env.ids["regions"]
    app_page("run", run=rid)
    query = "SELECT summary FROM run_summaries WHERE run_id = %s"
    with psycopg.connect(app_env.url, autocommit=True) as conn:
        row = conn.execute(query, (rid,)).fetchone()
        assert row is not None, "the Run page did not keep the summary it computed"
        doctored = json.loads(row[0])
        doctored["levels"][0]["requests_ok"] = 987_654
        conn.execute(
            "UPDATE run_summaries SET summary = %s WHERE run_id = %s", (json.dumps(doctored), rid)
        )
        try:
            st.cache_data.clear()  # a new server: nothing computed in this process counts
            at = app_page("run", run=rid)
            assert at.dataframe[0].value["ok"].iloc[0] == 987_654
        finally:
            conn.execute("DELETE FROM run_summaries WHERE run_id = %s", (rid,))
            st.cache_data.clear()


def test_run_page_puts_server_metrics_beside_client_series(
    app_page: Page, app_env: UiStore
) -> None:
    rid = app_env.ids["sweep"]  # scraped the sim's /metrics
    at = app_page("run", run=rid)
    text = page_text(at)
    assert "Where the time went" in text
    both = next(f for f in figures(at) if "Client and server" in f["layout"]["title"]["text"])
    names = trace_names(both)
    assert {"output tok/s", "in flight", "client TTFT p50", "queue", "running"} <= names
    y = next(t for t in both["data"] if t["name"] == "running")["y"]
    if isinstance(y, dict):  # plotly's typed-array encoding
        y = np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist()
    assert max(v for v in y if v is not None) > 0  # the server's batch, from the store
    table = next(t.value for t in at.table if "queue mean" in t.value.columns)
    assert [int(v) for v in table["level"]] == [0, 1]
    # the fixed sim has no queue: TTFT flat from 1 to 4 users, so no bottleneck named
    assert "neither" in text or "no single bottleneck" in text


def test_run_page_of_three_regions(app_page: Page, app_env: UiStore) -> None:
    at = app_page("run", run=app_env.ids["regions"])
    regions = {"eu-west", "us-east", "ap-south"}
    over_time = next(f for f in figures(at) if "per region" in f["layout"]["title"]["text"])
    assert trace_names(over_time) == regions
    net = next(t.value for t in at.table if "network RTT" in t.value.columns)
    assert set(net["region"]) == regions and (net["TTFT p50"].astype(float) > 0).all()
    at.radio(key="run_by").set_value("region").run()
    assert not at.exception
    curve = figures(at)[0]
    assert trace_names(curve) == {f"region {r}" for r in regions}


def test_run_page_of_failures(app_page: Page, app_env: UiStore) -> None:
    rid = app_env.ids["failures"]
    at = app_page("run", run=rid)
    n429 = count(
        app_env.url,
        "SELECT count(*) FROM requests WHERE run_id = %s AND http_status = 429",
        rid,
    )
    assert n429 > 0
    fails = next(d.value for d in at.dataframe if "kind" in d.value.columns)
    assert int(fails.loc[fails["kind"] == "http_429", "count"].iloc[0]) == n429
    assert f"Failed: {n429:,}" in page_text(at) or n429 < count(
        app_env.url, "SELECT count(*) FROM requests WHERE run_id = %s AND outcome <> 'ok'", rid
    )


def test_invalid_run_shows_the_banner_and_why(app_page: Page, app_env: UiStore) -> None:
    at = app_page("run", run=app_env.ids["invalid"])
    banner = at.error[0].value
    assert "INVALID run" in banner
    assert "dispatch delay" in banner and "0.0001 ms" in banner


def test_unknown_run_is_named(app_page: Page) -> None:
    at = app_page("run", run="00000000-0000-0000-0000-000000000000")
    assert "00000000-0000-0000-0000-000000000000 is not in the store" in page_text(at)


def test_compare_page(app_page: Page, app_env: UiStore) -> None:
    ids = app_env.ids
    at = app_page("compare", runs=f"{ids['sweep']},{ids['regions']},{ids['failures']}")
    assert at.title[0].value == "Compare runs"
    curves = figures(at)[0]
    assert len(trace_names(curves)) == 3
    frontier = figures(at)[1]
    assert "Output tokens/s" in frontier["layout"]["title"]["text"]
    changes = at.dataframe[0].value
    assert {"ui-regions", "ui-failures"} == {n.split(" · ")[0] for n in changes["run"]}
    assert {"ci_lower", "ci_upper", "regression"} <= set(changes.columns)
    ok = changes.dropna(subset=["ci_lower"])
    assert (ok["ci_lower"] <= ok["ci_upper"]).all()
    costs = at.table[0].value
    assert len(costs) == 3
    priced = costs[costs["basis"] == "self-hosted"]  # ui-regions: 3 USD per GPU-hour
    assert [n.split(" · ")[0] for n in priced["run"]] == ["ui-regions"]
    wall = count(
        app_env.url,
        "SELECT (EXTRACT(EPOCH FROM ended_at - started_at) * 1e6)::bigint FROM runs "
        "WHERE run_id = %s",
        ids["regions"],
    )
    assert float(priced["cost USD"].iloc[0]) == pytest.approx(3.0 * wall / 1e6 / 3600)
    # per token: the chunk arrays the page left in the store are read now, for both charts
    at.selectbox(key="cmp_metric").select("itl_ms").run()
    at.selectbox(key="cmp_frontier_metric").select("itl_ms").run()
    assert not at.exception
    itl_curves, itl_frontier = figures(at)[:2]
    assert len(trace_names(itl_curves)) == 3
    assert "ITL per token" in itl_frontier["layout"]["title"]["text"]


def test_sla_page_verdicts(app_page: Page, app_env: UiStore) -> None:
    """The page judges as `peakload sla` does (analysis.verdicts.verdict.judge_claims): the
    verdict with its exit code first, then each claim at each of the sweep's two loads."""
    at = app_page("sla", run=app_env.ids["sweep"])
    shown = [e.value for e in (*at.success, *at.error, *at.warning)]
    assert any(v.startswith("**") and "(exit " in v for v in shown), shown
    assert any("p90 ttft_ms < 500 @ level 0: concurrency 1" in v for v in shown), shown
    assert any("p90 ttft_ms < 500 @ level 1: concurrency 4" in v for v in shown), shown
    # p50 of a 40-ms TTFT under 500 ms at 90 %: 4 requests a load prove it
    easy = 'confidence = 0.9\n[[claims]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 500\n'
    at.text_area(key="sla_text").input(easy).run()
    passed = [e.value for e in at.success]
    assert sum("PASS** — p50 ttft_ms < 500 @ level" in v for v in passed) == 2, passed
    claims = '[[claims]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 1\n'
    at.text_area(key="sla_text").input(claims).run()
    assert at.error[0].value.startswith("**FAILED** (exit 1): fail: p50 ttft_ms < 1 @ level")
    assert "FAIL" in at.error[1].value
    at.text_area(key="sla_text").input('[[claims]]\nmetric = "ttft"\n').run()
    assert "The claims are not valid" in at.error[0].value
    assert "claims[0].metric" in at.error[0].value


def test_nightly_page(app_page: Page, app_env: UiStore) -> None:
    at = app_page("nightly")
    assert at.selectbox(key="n_schedule").value == SCHEDULE
    history = figures(at)[0]
    points = history["data"][0]
    assert len(points["x"]) == 3  # sweep, regions, failures ran on the schedule
    links = at.get("page_link")
    assert len(links) == 3


def test_nightly_page_shows_the_cli_verdict(
    app_page: Page, app_env: UiStore, tmp_path: Path
) -> None:
    at = app_page("nightly")
    out = tmp_path / "nightly.json"
    args = ["nightly", SCHEDULE, "--metric", "ttft_ms", "--percentile", "99", "--last", "365"]
    res = CliRunner().invoke(cli, [*args, "--json", str(out)])
    cli_result = json.loads(out.read_text())
    assert res.exit_code == cli_result["exit_code"]
    shown = [e.value for e in (*at.success, *at.error, *at.warning)]
    verdicts = [v for v in shown if v.startswith("**")]
    assert len(verdicts) == 1
    # three runs on the schedule: too few to decide (the detection needs six); the newest is
    # completed and valid (validity relaxed in tests/ui/stored_runs), so the history decides
    assert res.exit_code == 3
    assert verdicts[0].startswith(
        f"**{cli_result['verdict'].upper()}** (exit {res.exit_code}): Too few runs to decide: "
        f"{cli_result['runs_used']} usable"
    )
    if cli_result.get("newest_run_problem"):
        assert cli_result["newest_run_problem"] in verdicts[0]
    assert at.warning and verdicts[0] in [e.value for e in at.warning]
    assert f"`peakload nightly {SCHEDULE} --metric ttft_ms --percentile 99" in page_text(at)


def test_launch_refuses_a_target_outside_the_policy(
    app_page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", raising=False)
    monkeypatch.delenv("PEAKLOAD_TARGET_ALLOWLIST", raising=False)
    spec = (
        'name = "x"\n[target]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m"\n[load]\nconcurrency = [1]\nduration_s = 1\n'
    )
    at = app_page("launch")
    at.text_area(key="launch_text").input(spec).run()
    assert "Refused by the target policy" in at.error[0].value
    assert "loopback" in at.error[0].value
    assert not [b for b in at.button if b.key == "launch_start"]
    monkeypatch.setenv("PEAKLOAD_TARGET_ALLOWLIST", "127.0.0.1")
    at.run()
    assert not at.error
    assert "is allowed" in at.success[0].value
    at.text_area(key="launch_text").input('name = "x"\n[target]\napi = "grpc"\n').run()
    assert "The spec is not valid" in at.error[0].value


def test_no_canary_in_any_page(app_page: Page, app_env: UiStore) -> None:
    ids = app_env.ids
    both = f"{ids['sweep']},{ids['regions']}"
    pages = [("runs", {}), ("nightly", {}), ("compare", {"runs": both})]
    pages += [("run", {"run": r}) for r in ids.values()] + [("sla", {"run": ids["sweep"]})]
    for name, params in pages:
        at = app_page(name, **params)
        seen = page_text(at) + "".join(d.value.to_csv() for d in at.dataframe)
        seen += json.dumps([f for f in figures(at)])
        assert CANARY_KEY not in seen, name
        assert CANARY_PROMPT.split()[0] not in seen, name


def test_run_page_shows_the_parameter_probe(app_page: Page, app_env: UiStore) -> None:
    rid = app_env.ids["regions"]
    verdicts = [
        {"param": "seed", "verdict": "ignored", "detail": "differs"},
        {"param": "n", "verdict": "honoured", "detail": "2 choices"},
    ]
    result = {
        "target": "http://t/v1/chat/completions",
        "api": "openai-chat",
        "model": "m",
        "probed_at": "2026-12-01T09:00:00+00:00",
        "verdicts": verdicts,
    }
    with psycopg.connect(app_env.url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO run_probes (run_id, probed_at, target, result) VALUES (%s, %s, %s, %s)",
            (rid, result["probed_at"], result["target"], json.dumps(result)),
        )
    try:
        from ui.data import run as run_data

        run_data.probe.clear()  # an earlier page of this run cached "no probe"
        at = app_page("run", run=rid)
        probe = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
        assert list(zip(probe["parameter"], probe["verdict"], strict=True)) == [
            ("seed", "ignored"),
            ("n", "honoured"),
        ]
    finally:
        with psycopg.connect(app_env.url, autocommit=True) as conn:
            conn.execute("DELETE FROM run_probes WHERE run_id = %s", (rid,))


@pytest.mark.parametrize("kind", ["sweep", "failures"])
def test_run_page_shows_the_verdict_peakload_run_gave(
    app_page: Page, app_env: UiStore, kind: str
) -> None:
    """The Run page states the run's verdict against its own spec (judge_run: what `peakload
    run` exited with), each SLO at each load of the sweep; the 429s of `failures` fail its
    error budget."""
    from analysis.store.load import load_levels, load_requests, load_run
    from analysis.verdicts.verdict import judge_run

    rid = app_env.ids[kind]
    with psycopg.connect(app_env.url) as c:
        want = judge_run(load_run(c, rid), load_requests(c, rid), load_levels(c, rid))
    at = app_page("run", run=rid)
    alerts = [e.value for e in (*at.success, *at.error, *at.warning)]
    line = next(v for v in alerts if v.startswith("**Verdict: "))
    assert line == (
        f"**Verdict: {want.code.name.replace('_', ' ')}** (exit {int(want.code)}, as "
        f"`peakload run` exits): {want.reason}"
    )
    # a static table: the page's dataframes keep their order
    criteria = next(t.value for t in at.table if "exceedances" in t.value.columns).reset_index()
    assert list(criteria["claim"]) == [v.claim for v in want.verdicts]
    if kind == "sweep":
        assert want.loads == 2 and "p90 ttft_ms < 500 @ level 1: concurrency 4" in set(
            criteria["claim"]
        )
    else:
        assert int(want.code) == 1 and line in [e.value for e in at.error]


def test_run_page_reads_the_verdict_kept_with_the_summary(app_page: Page, app_env: UiStore) -> None:
    """The verdict `peakload run` exits with is kept on its summary's row
    (analysis.store.summaries); a page keeps the one it judges, and the next server reads that
    row instead of judging every request again: a doctored reason in it shows on the page."""
    import streamlit as st

    rid = app_env.ids["failures"]
    app_page("run", run=rid)
    query = "SELECT verdict FROM run_summaries WHERE run_id = %s"
    with psycopg.connect(app_env.url, autocommit=True) as conn:
        row = conn.execute(query, (rid,)).fetchone()
        assert row is not None and row[0] is not None, "the Run page did not keep its verdict"
        doctored = json.loads(row[0])
        doctored["reason"] = "a reason only the kept row holds"
        conn.execute(
            "UPDATE run_summaries SET verdict = %s WHERE run_id = %s", (json.dumps(doctored), rid)
        )
        try:
            st.cache_data.clear()  # a new server: nothing computed in this process counts
            at = app_page("run", run=rid)
            alerts = [e.value for e in (*at.success, *at.error, *at.warning)]
            assert any(v.endswith(": a reason only the kept row holds") for v in alerts), alerts
        finally:
            conn.execute("DELETE FROM run_summaries WHERE run_id = %s", (rid,))
            st.cache_data.clear()
