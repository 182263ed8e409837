"""Connections and the server's own timings: connect time, reuse, resends, the server's prefill and
ITL, client vs server."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics.base import (
    NS_PER_MS,
    BoolArray,
    FloatArray,
    float_column,
    percentile,
)

# (columns of deploy/sql/0120: NULL, so NaN here, on rows stored before it; a frame without
# them has nothing on record)


def _opt(df: pd.DataFrame, name: str) -> FloatArray:
    return float_column(df, name) if name in df.columns else np.full(len(df), np.nan)


CONNECTION_COLUMNS = ("sent_ns", "resent", "connect_ns")
"""The request columns the connection metrics below read (`connect_ms`, `connection_recorded`,
`new_connection_share`, `resent_total`)."""


def connect_ms(df: pd.DataFrame) -> FloatArray:
    """Connection set-up inside a request: connect_ns / 1e6 (TCP and TLS, ms on the measuring
    host's monotonic clock); NaN where an idle kept-alive connection was reused."""
    return _opt(df, "connect_ns") / NS_PER_MS


def connection_recorded(df: pd.DataFrame) -> BoolArray:
    """Requests whose connection is on record: sent (sent_ns set) and `resent` not NULL (rows
    stored before deploy/sql/0120 say nothing of their connection: NaN there)."""
    return np.asarray(np.isfinite(float_column(df, "sent_ns")) & np.isfinite(_opt(df, "resent")))


def new_connection_share(df: pd.DataFrame) -> float | None:
    """Share of the requests that opened a new connection: requests with connect_ns set /
    requests whose connection is on record (`connection_recorded`); None when none is."""
    rec = connection_recorded(df)
    n = int(rec.sum())
    return int(np.isfinite(_opt(df, "connect_ns")[rec]).sum()) / n if n else None


def resent_total(df: pd.DataFrame) -> int | None:
    """Re-sends: sum of `resent` over the requests (a request sent again, once, on a new
    connection after its reused one died before any response byte); None when none has it on
    record."""
    v = _opt(df, "resent")
    v = v[np.isfinite(v)]
    return int(v.sum()) if v.size else None


def server_prefill_ms(df: pd.DataFrame) -> FloatArray:
    """The server's own time to first token: server_prefill_ms + server_queue_ms (the queue
    counted as 0 where the server reports none), ms on the server's clock; NaN where it
    reports no prefill time."""
    queue = np.nan_to_num(_opt(df, "server_queue_ms"), nan=0.0)
    return _opt(df, "server_prefill_ms") + queue


def server_itl_ms(df: pd.DataFrame) -> FloatArray:
    """The server's own time between tokens: server_decode_ms / (server_decode_tokens - 1)
    (ms), for server_decode_tokens > 1, else NaN. decode_ms runs from the first generated
    token to the last (loadgen.target.ServerTimings), i.e. over decode_tokens - 1 gaps: the
    convention of the client's ITL and TPOT. (llama.cpp's own predicted_per_token_ms, and
    ServerTimings.ms_per_token, divide by all decode_tokens: lower by a factor (n - 1) / n,
    8 % at 12 tokens, which a comparison with the client would count as network time.)"""
    n = _opt(df, "server_decode_tokens")
    with np.errstate(divide="ignore", invalid="ignore"):
        v = _opt(df, "server_decode_ms") / (n - 1.0)
    return np.where(n > 1, v, np.nan)


def client_vs_server(
    ttft: FloatArray,
    prefill: FloatArray,
    itl: tuple[float, int],
    per_token: FloatArray,
) -> dict[str, float | int | None] | None:
    """The client's latencies set against the server's own account, for one set of requests:
    `ttft` (`ttft_ms`) and `prefill` (`server_prefill_ms`) per request; `itl` = (p50, samples)
    of the client's per-token ITL (`itl_per_token_ms`) over the requests with a finite
    `per_token` (`server_itl_ms`).

    - client_ttft_p50_ms, server_prefill_p50_ms: p50 of each over the requests having both
      (n: ttft_n); ttft_gap_ms = client p50 - server p50: network, the client, and any queue
      the server does not report.
    - client_itl_p50_ms, server_itl_p50_ms (p50 over requests; n: itl_n requests,
      client_itl_samples tokens); itl_gap_ms = client p50 - server p50.
    Differences are of the two p50s, not p50s of per-request differences. None when no request
    has a server time."""
    both = np.isfinite(ttft) & np.isfinite(prefill)
    per = per_token[np.isfinite(per_token)]
    if not both.any() and per.size == 0:
        return None
    c_ttft = float(percentile(ttft[both], 50.0))
    s_ttft = float(percentile(prefill[both], 50.0))
    c_itl = float(itl[0]) if itl[1] else float("nan")
    s_itl = float(percentile(per, 50.0))

    def num(x: float) -> float | None:
        return x if np.isfinite(x) else None

    return {
        "ttft_n": int(both.sum()),
        "client_ttft_p50_ms": num(c_ttft),
        "server_prefill_p50_ms": num(s_ttft),
        "ttft_gap_ms": num(c_ttft - s_ttft),
        "itl_n": int(per.size),
        "client_itl_samples": int(itl[1]),
        "client_itl_p50_ms": num(c_itl),
        "server_itl_p50_ms": num(s_itl),
        "itl_gap_ms": num(c_itl - s_itl),
    }
