"""Widgets the pages share: a chart with its PNG toolbar and a CSV of its data, the run pickers
that keep the selection in the URL (`?run=` and `?runs=`), and number formatting."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Literal

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ui import charts
from ui.data import shared

RUN_PARAM = "run"
RUNS_PARAM = "runs"


def chart(fig: go.Figure, frame: pd.DataFrame, name: str) -> None:
    """An interactive chart (zoom, hover; the toolbar saves a PNG), then downloads of its data
    (CSV) and of the figure as PNG and SVG (drawn only when clicked: ui.charts.static_image)."""
    st.plotly_chart(
        fig,
        theme="streamlit",
        key=f"chart-{name}",
        config={
            "displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": name, "scale": 2},
        },
    )
    c = st.columns(3)
    with c[0]:
        csv_download(frame, name)
    formats: tuple[Literal["png", "svg"], ...] = ("png", "svg")
    for col, fmt in zip(c[1:], formats, strict=True):
        col.download_button(
            f"{name}.{fmt}",
            data=partial(charts.static_image, fig, fmt),
            file_name=f"{name}.{fmt}",
            mime=charts.IMAGE_MIME[fmt],
            key=f"{fmt}-{name}",
            on_click="ignore",
            icon=":material/image:",
        )


def csv_download(frame: pd.DataFrame, name: str) -> None:
    """A button that downloads `frame` as `{name}.csv` (encoded only when clicked)."""
    st.download_button(
        f"Download {name}.csv",
        data=lambda: shared.csv_bytes(frame),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"csv-{name}",
        on_click="ignore",
        icon=":material/download:",
    )


def fmt(x: Any, digits: int = 1, unit: str = "") -> str:
    """A number for a card: '—' when missing or not finite."""
    if x is None:
        return "—"
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(f):
        return "—"
    return f"{f:,.{digits}f}{(' ' + unit) if unit else ''}"


def pick_run(label: str = "Run") -> str | None:
    """The run in `?run=`, else one picked from the newest runs (then written to the URL)."""
    options = shared.labels(limit=200)
    current = st.query_params.get(RUN_PARAM)
    if current and current not in options:
        try:
            r = shared.run(current)
        except LookupError:
            st.error(f"Run {current} is not in the store.")
            current = None
        else:
            options = {current: f"{r['name']} · {current[:8]}", **options}
    if not options:
        st.info("No runs stored yet: start one with `peakload run SPEC` or the Launch page.")
        return None
    keys = list(options)
    chosen = st.selectbox(
        label,
        keys,
        index=keys.index(current) if current in keys else 0,
        format_func=lambda k: options[k],
    )
    if chosen and st.query_params.get(RUN_PARAM) != chosen:
        st.query_params[RUN_PARAM] = chosen
    return str(chosen) if chosen else None


def pick_runs(label: str = "Runs") -> list[str]:
    """Several runs: `?runs=a,b,c`, editable with a multiselect (kept in the URL)."""
    options = shared.labels(limit=200)
    wanted = [r for r in (st.query_params.get(RUNS_PARAM) or "").split(",") if r]
    missing = [r for r in wanted if r not in options]
    if missing:
        options = {**shared.labels_for(tuple(missing)), **options}
    chosen = st.multiselect(
        label,
        list(options),
        default=[r for r in wanted if r in options],
        format_func=lambda k: options[k],
    )
    joined = ",".join(chosen)
    if (st.query_params.get(RUNS_PARAM) or "") != joined:
        st.query_params[RUNS_PARAM] = joined
    return list(chosen)


METRICS = {
    "ttft_ms": "TTFT from send",
    "ttfat_ms": "time to first answer token",
    "ttft_sched_ms": "TTFT from schedule",
    "tpot_ms": "TPOT",
    "itl_ms": "ITL per token",
    "e2e_ms": "E2E from send",
    "e2e_sched_ms": "E2E from schedule",
}


def pick_metric(key: str, options: tuple[str, ...] = tuple(METRICS)) -> str:
    return str(st.selectbox("Metric", options, format_func=lambda k: METRICS.get(k, k), key=key))


def verdict_alert(judged: dict[str, Any], *, prefix: str = "", exit_note: str = "") -> None:
    """A judgement's JSON (analysis.verdicts.verdict.RunJudgement.to_json) as one alert: green
    for a pass (exit 0), red for a fail (1), amber for any other code; "**PREFIXWORD** (exit N,
    EXIT_NOTE): reason"."""
    word = judged["verdict"].replace("_", " ").upper()
    note = f", {exit_note}" if exit_note else ""
    line = f"**{prefix}{word}** (exit {judged['exit_code']}{note}): {judged['reason']}"
    {0: st.success, 1: st.error}.get(judged["exit_code"], st.warning)(line)
