"""The Run page's exports (CSV and Parquet of the requests via analysis.reports.export, the HTML
report via analysis.reports.report), chart builders, and the Launch page starting a real run."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pandas as pd
import psycopg
import pytest
from streamlit.testing.v1 import AppTest

from tests.support.sim import start_sim
from tests.ui.conftest import UiStore, page_text
from tests.ui.stored_runs import CANARY_KEY, CANARY_KEY_ENV, CANARY_PROMPT
from ui import charts
from ui.data import derive
from ui.data import run as run_data


def test_exports_hold_every_request_and_no_secret(app_env: UiStore) -> None:
    rid = app_env.ids["failures"]
    with psycopg.connect(app_env.url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE http_status = 429) FROM requests "
            "WHERE run_id = %s",
            (rid,),
        ).fetchone()
    assert row is not None
    n, n429 = row
    csv = run_data.export_bytes(rid, "csv")
    frame = pd.read_csv(io.BytesIO(csv))
    assert len(frame) == n and int((frame["http_status"] == 429).sum()) == n429
    assert "chunk_offsets_us" in frame.columns
    parquet = pd.read_parquet(io.BytesIO(run_data.export_bytes(rid, "parquet")))
    assert len(parquet) == n
    for blob in (csv, run_data.export_bytes(rid, "parquet")):
        assert CANARY_KEY.encode() not in blob and CANARY_PROMPT.split()[0].encode() not in blob
    assert not {"prompt_text", "response_text"} & set(frame.columns)


def test_html_report_of_the_invalid_run(app_env: UiStore) -> None:
    html = run_data.report_html(app_env.ids["invalid"]).decode()
    assert html.startswith("<!doctype html>")
    assert "INVALID RUN" in html and "ui-invalid" in html
    assert CANARY_KEY not in html


def test_percentile_chart_uses_the_tail_axis() -> None:
    import numpy as np

    values = np.linspace(1.0, 1000.0, 5000)
    curve = derive.curve(values, "all")
    assert curve["percentile"].max() <= 100.0 * (1 - 1 / 5000) + 1e-9
    p99 = curve.loc[np.isclose(curve["percentile"], 99.0), "value_ms"].iloc[0]
    assert p99 == pytest.approx(np.percentile(values, 99.0))
    assert (curve["lo_ms"] <= curve["value_ms"]).all() and (
        curve["value_ms"] <= curve["hi_ms"]
    ).all()
    fig = charts.percentile_curves(curve, "t", "ms")
    axis = fig.layout.xaxis
    assert axis.type == "log"
    assert list(axis.ticktext)[:5] == ["p0", "p50", "p90", "p99", "p99.9"]
    assert list(axis.tickvals)[:5] == pytest.approx([1.0, 2.0, 10.0, 100.0, 1000.0])
    assert fig.layout.yaxis.type == "log"  # 1 ms to 1 s: three decades


def test_the_latency_axis_is_logarithmic_only_across_decades() -> None:
    """The demo's shape: levels at ~80 ms, ~600 ms and 7.6 s share one log axis; one level
    alone (a factor 3 from p0 to p99.9) stays linear. Few samples still label p90 to p99.9."""
    import numpy as np

    rng = np.random.default_rng(7)
    levels = {"level 1": 80.0, "level 8": 600.0, "level 32": 7600.0}
    curves = pd.concat(
        [derive.curve(rng.uniform(0.7, 1.4, 40) * v, k) for k, v in levels.items()],
        ignore_index=True,
    )
    fig = charts.percentile_curves(curves, "t", "TTFT (ms)")
    assert fig.layout.yaxis.type == "log" and "log scale" in fig.layout.yaxis.title.text
    assert list(fig.layout.xaxis.ticktext) == ["p0", "p50", "p90", "p99", "p99.9"]
    assert 10 ** fig.layout.xaxis.range[1] >= 1000.0  # the axis reaches p99.9
    one = charts.percentile_curves(curves[curves["series"] == "level 8"], "t", "TTFT (ms)")
    assert one.layout.yaxis.type == "linear"


def test_timeslices_per_window_beside_the_server(app_env: UiStore) -> None:
    """Windows of send time over the whole run: every sent request counted once, ok ones'
    percentiles per window; the chart has the server's panels when its rows are given."""
    import numpy as np

    from analysis import metrics as m
    from analysis.stats.timeslices import timeslices
    from ui.data import shared

    rid = app_env.ids["sweep"]
    df = shared.requests(rid)
    slices = timeslices(df, "ttft_ms", 2.0)
    sent = int(df["sent_ns"].notna().sum())
    assert (
        int(slices["sent"].sum()) == sent
        and (slices["ok"] + slices["failed"] == slices["sent"]).all()
    )
    steps = slices["window"].diff().dropna() / pd.Timedelta(seconds=2)
    assert (steps == steps.round()).all() and (steps >= 1).all()
    first = slices.iloc[0]
    at = df["scheduled_at"] + pd.to_timedelta(df["sent_ns"], "ns")
    inside = (at >= first["window"]) & (at < first["window"] + pd.Timedelta(seconds=2))
    ok = inside & (df["outcome"] == "ok")
    assert int(inside.sum()) == first["sent"]
    assert first["p90_ms"] == pytest.approx(np.quantile(m.ttft_ms(df[ok]), 0.9))
    server = run_data.server_rows(rid, 2.0)
    fig = charts.timeslices(slices, server, "TTFT", "t")
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:2] == ["TTFT per window (ms)", "requests per window"]
    plain = charts.timeslices(slices, pd.DataFrame(columns=server.columns), "TTFT", "t")
    assert len(plain.layout.annotations) == 2
    with pytest.raises(ValueError, match="window_s"):
        timeslices(df, "ttft_ms", 0.0)


def test_launch_page_starts_a_run_on_an_allowed_target(
    app_page: Callable[..., AppTest],
    app_env: UiStore,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: object,
) -> None:
    monkeypatch.setenv("PEAKLOAD_TARGET_ALLOWLIST", "127.0.0.1")
    monkeypatch.delenv("PEAKLOAD_REDIS_URL", raising=False)
    with start_sim(["--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        spec = (
            f'name = "ui-launched"\n[target]\napi = "openai-chat"\nbase_url = "{sim.base_url}"\n'
            f'model = "m"\napi_key_env = "{CANARY_KEY_ENV}"\n[workload]\nprompt_tokens = 16\n'
            "output_tokens = 8\n[load]\nconcurrency = [1]\nduration_s = 1.5\n"
            "[validity]\nmax_loop_lag_p99_ms = 10000.0\nmax_dispatch_delay_p99_ms = 10000.0\n"
            "max_cpu_percent = 10000.0\n"
        )
        at = app_page("launch")
        at.text_area(key="launch_text").input(spec).run()
        assert "is allowed" in at.success[0].value
        at.button(key="launch_probe").click().run()
        assert "Probe: nothing rejected" in page_text(at), [e.value for e in at.error]
        at.button(key="launch_start").click().run()
        assert not at.exception
        text = page_text(at)
        assert "Run **" in text and "(local)" in text
        run_id = text.split("Run **", 1)[1].split("**", 1)[0]
        deadline = time.monotonic() + 60
        while True:
            with psycopg.connect(app_env.url) as conn:
                row = conn.execute(
                    "SELECT status, requests_scheduled FROM runs WHERE run_id = %s", (run_id,)
                ).fetchone()
            if row and row[0] != "running" and row[0] != "pending":
                break
            assert time.monotonic() < deadline, f"run {run_id} did not finish: {row}"
            time.sleep(0.3)
    assert row[0] == "completed" and row[1] > 0


def test_nightly_chart_marks_change_points() -> None:
    import numpy as np

    from analysis.verdicts.nightly import change_points

    values = [50.0, 51.0, 49.5, 50.5, 50.0, 80.0, 81.0, 79.5, 80.5]
    cps = change_points(values)
    assert cps == [5]
    history = pd.DataFrame(
        {
            "run_id": [f"{i:08d}-run" for i in range(len(values))],
            "name": "nightly",
            "created_at": pd.date_range("2026-11-01", periods=len(values), freq="D", tz="UTC"),
            "valid": "valid",
            "value": values,
            "n": 500,
            "change_point": [i in cps for i in range(len(values))],
        }
    )
    fig = charts.nightly(history, "t", "ms")
    marks = [t for t in fig.data if t.name == "change point"]
    assert len(marks) == 1 and list(marks[0].y) == [80.0]
    assert len(fig.layout.shapes) == 1  # the dashed line where the new level starts
    assert np.isclose(fig.data[0].y, values).all()


def test_the_run_pages_server_chart_draws_per_request_timings_without_a_scrape() -> None:
    """No Prometheus series, but the requests report queue + prefill: the Run page's chart
    draws them on the client's buckets, labelled with their source."""
    from analysis.stats import server_metrics as sm
    from analysis.stats import server_split

    t0 = pd.Timestamp("2026-12-01 10:00:00", tz="UTC")
    df = pd.DataFrame(
        {
            "outcome": "ok",
            "scheduled_at": [t0, t0 + pd.Timedelta(seconds=1)],
            "first_token_ns": [2e8, 2e8],
            "server_queue_ms": [3.0, 9.0],
            "server_prefill_ms": [20.0, 21.0],
        }
    )
    rows = server_split.server_series(
        sm.bucketed(
            sm.role_series(pd.DataFrame(columns=["t", "name", "labels", "value"]), {}), 1.0
        ),
        server_split.bucket_request_timings(df, 1.0),
    )
    fig = charts.client_and_server(pd.DataFrame(), rows, "t")
    lines = {t.name: list(t.y) for t in fig.data}
    assert lines[f"server queue ({server_split.FROM_REQUESTS})"] == [3.0, 9.0]
    assert lines[f"server prefill + first step ({server_split.FROM_REQUESTS})"] == [20.0, 21.0]
    assert not any(server_split.FROM_HISTOGRAMS in name for name in lines)


def test_a_figure_downloads_as_png_and_svg() -> None:
    """kaleido draws the figure with plotly.js in the installed Chromium, offline."""
    import struct
    import xml.etree.ElementTree as ET

    import numpy as np

    curves = derive.curve(np.linspace(1.0, 900.0, 300), "level 1")
    fig = charts.percentile_curves(curves, "spectrum", "TTFT (ms)")
    png = charts.static_image(fig, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, _height = struct.unpack(">II", png[16:24])
    assert width == 2 * charts.IMAGE_WIDTH_PX
    root = ET.fromstring(charts.static_image(fig, "svg"))
    assert root.tag.endswith("svg")
    text = "".join(root.itertext())
    assert all(label in text for label in ("p50", "p90", "p99", "p99.9"))


def test_an_image_drawn_before_kaleido_s_page_loaded_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kaleido's page-load race is tried again, up to the limit; the figure's own errors are not."""
    import plotly.graph_objects as go

    calls: list[int] = []

    def flaky(failures: int, message: str) -> Callable[..., bytes]:
        def to_image(self: go.Figure, **kwargs: object) -> bytes:
            calls.append(1)
            if len(calls) <= failures:
                raise RuntimeError(f"{{'description': 'ReferenceError: {message}'}}")
            return b"image"

        return to_image

    fig = go.Figure()
    monkeypatch.setattr(go.Figure, "to_image", flaky(2, charts.PAGE_NOT_LOADED))
    assert charts.static_image(fig, "svg") == b"image" and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(go.Figure, "to_image", flaky(3, charts.PAGE_NOT_LOADED))
    with pytest.raises(RuntimeError, match="kaleido_scopes"):
        charts.static_image(fig, "png")
    assert len(calls) == charts.IMAGE_ATTEMPTS
    calls.clear()
    monkeypatch.setattr(go.Figure, "to_image", flaky(1, "x is not a trace"))
    with pytest.raises(RuntimeError, match="not a trace"):
        charts.static_image(fig, "png")
    assert len(calls) == 1
