"""The axes every latency chart draws. The percentile tail axis (HdrHistogram style): a
percentile p sits at x = 1 / (1 - p/100) on a log scale, always labelled at p50, p90, p99 and
p99.9 (and further where the data reach). The latency axis: log scale once the values span more
than a decade, so a 32-stream level at 7.6 s does not flatten the 1-stream curve at 80 ms. One
definition for the HTML report (plots.py), its PNG figures (figures.py) and the UI (ui/charts.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go

# labelled on every tail axis, whether or not the data reach them (the axis runs to p99.9 at least)
TAIL_LABELS = (50.0, 90.0, 99.0, 99.9)
# labelled too where the data reach them
TAIL_FURTHER = (99.99, 99.999, 99.9999)
# a latency axis turns logarithmic when its largest positive value exceeds the smallest this much
LOG_SPAN = 10.0


def tail_x(p: float) -> float:
    """Where percentile `p` (0-100) sits on the tail axis."""
    return 1.0 / (1.0 - p / 100.0)


def tail_label(p: float) -> str:
    return f"p{p:g}"


def tail_ticks(max_x: float | None = None) -> list[float]:
    """The percentiles labelled on a tail axis whose data reach `max_x` (None: the labels only):
    p0, TAIL_LABELS, and those of TAIL_FURTHER within reach."""
    reach = tail_x(TAIL_LABELS[-1]) if max_x is None else max_x * 1.01
    return [0.0, *TAIL_LABELS, *(p for p in TAIL_FURTHER if tail_x(p) <= reach)]


def set_tail_axis(
    fig: go.Figure, *, title: str, max_x: float | None = None, row: int | None = None
) -> None:
    """Make `fig`'s x axis (of subplot `row`, else all) the tail axis: ticked at `tail_ticks`,
    running from p0 to the data's reach `max_x` or p99.9, whichever is further."""
    ticks = tail_ticks(max_x)
    right = max(tail_x(TAIL_LABELS[-1]), max_x or 0.0) * 1.05
    fig.update_xaxes(
        type="log",
        range=[0.0, float(np.log10(right))],  # a log axis' range is in decades
        tickmode="array",
        tickvals=[tail_x(p) for p in ticks],
        ticktext=[tail_label(p) for p in ticks],
        title_text=title,
        row=row,
        col=1 if row else None,
    )


def spans_decades(values: Iterable[float]) -> bool:
    """True when the positive finite values span more than LOG_SPAN (max / min)."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return bool(v.size) and float(v.max()) > LOG_SPAN * float(v.min())


def set_latency_axis(
    fig: go.Figure, values: Iterable[float], *, title: str, row: int | None = None
) -> bool:
    """`fig`'s y axis (of subplot `row`, else all): log scale when `values` span decades, else
    linear; the title says which. Returns whether it is logarithmic."""
    log = spans_decades(values)
    fig.update_yaxes(
        type="log" if log else "linear",
        title_text=f"{title}, log scale" if log else title,
        row=row,
        col=1 if row else None,
    )
    return log
