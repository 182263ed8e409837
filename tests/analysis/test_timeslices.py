"""analysis.stats.timeslices by hand: a request belongs to the window of its send (scheduled
time + sent_ns, to the nanosecond), windows on the epoch grid, ok and failed counted among the
sent, quantiles over the window's ok requests only, unsent requests left out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.stats.timeslices import timeslices

T0 = pd.Timestamp("2026-11-01T00:00:00Z")


def _frame(rows: list[tuple[float, float | None, str, float]]) -> pd.DataFrame:
    """(scheduled s after T0, sent_ns or None, outcome, ttft ms) per request."""
    sched = [T0 + pd.Timedelta(seconds=s) for s, _, _, _ in rows]
    sent = [np.nan if ns is None else ns for _, ns, _, _ in rows]
    return pd.DataFrame(
        {
            "scheduled_at": pd.DatetimeIndex(sched),
            "sent_ns": np.array(sent, dtype=np.float64),
            "outcome": [o for _, _, o, _ in rows],
            "first_token_ns": [
                np.nan if ns is None else ns + ttft * 1e6 for _, ns, _, ttft in rows
            ],
        }
    )


def test_windows_by_send_time_to_the_nanosecond() -> None:
    rows = [
        (0.2, 0.0, "ok", 10.0),
        (0.5, 499_999_999.0, "ok", 30.0),  # sent 1 ns before the second window
        (0.5, 500_000_000.0, "ok", 50.0),  # sent at its start
        (1.5, 0.0, "http_error", 70.0),  # failed: counted, not in the quantiles
        (1.9, None, "not_sent", 0.0),  # never sent: in no window
        (3.2, 1_000.0, "ok", 90.0),  # window 3; window 2 has nothing
    ]
    out = timeslices(_frame(rows), "ttft_ms", 1.0)
    assert out["window"].tolist() == [
        T0,
        T0 + pd.Timedelta(seconds=1),
        T0 + pd.Timedelta(seconds=3),
    ]
    assert out["sent"].tolist() == [2, 2, 1]
    assert out["ok"].tolist() == [2, 1, 1] and out["failed"].tolist() == [0, 1, 0]
    assert out["ok_per_s"].tolist() == [2.0, 1.0, 1.0]
    assert out["p50_ms"].iloc[0] == pytest.approx(np.percentile([10.0, 30.0], 50))
    assert out["p99_ms"].iloc[0] == pytest.approx(np.percentile([10.0, 30.0], 99))
    assert out["p50_ms"].iloc[1] == pytest.approx(50.0)  # the failure's 70 ms left out
    assert out["p90_ms"].iloc[2] == pytest.approx(90.0)


def test_no_sent_request_gives_an_empty_table() -> None:
    out = timeslices(_frame([(0.0, None, "not_sent", 0.0)]), "ttft_ms", 1.0)
    assert out.empty and list(out.columns)[:2] == ["window", "sent"]
    with pytest.raises(ValueError, match="window_s must be positive"):
        timeslices(_frame([(0.0, 0.0, "ok", 1.0)]), "ttft_ms", 0.0)
