"""Every metric peakload reports, one definition each, formula in the docstring. Vectorised over a
requests DataFrame (see analysis.store.load.load_requests) and flat chunk arrays (`ChunkArrays`).

Per-request formulas (TTFT, TPOT, E2E, ITL per token, …) are loadgen.results.formulas' (with their
SQL forms, so the store and the runner compute the same numbers); this module applies them to
frames and chunk arrays and defines the rest (throughput, goodput, connections, server times).

Clocks: `*_ns` columns are ns on the measuring host's monotonic clock from the request's
*scheduled* time; chunk offsets are µs from *send*. Latencies are returned in ms (float64), NaN
where a request has no value. Percentiles are exact, from raw rows, numpy `method="linear"`.

The definitions live by topic in this package's modules (base, latency, chunks, rates, failures,
server); this namespace holds them all, so a caller writes `metrics.ttft_ms`.
"""

from __future__ import annotations

from analysis.metrics.base import PERCENTILE_METHOD, BoolArray, FloatArray, IntArray, percentile
from analysis.metrics.chunks import (
    ChunkArrays,
    Gaps,
    chunk_gaps,
    itl_per_chunk_ms,
    itl_per_token_ms,
    max_itl_ms,
    per_token_values,
    ptr_of,
)
from analysis.metrics.failures import (
    TOKEN_AGREEMENT_COLUMNS,
    error_rates,
    failure_kind,
    token_agreement,
)
from analysis.metrics.latency import (
    e2e_ms,
    e2e_sched_ms,
    of_frame,
    output_speed_tps,
    tpot_ms,
    ttfat_ms,
    ttft_ms,
    ttft_sched_ms,
)
from analysis.metrics.rates import (
    SLO_METRICS,
    Arrivals,
    Timeline,
    Window,
    completed_in,
    epoch_ns,
    goodput,
    in_flight_max,
    in_flight_mean,
    level_window,
    meets_slos,
    output_token_rate,
    per_request_values,
    request_rate,
    steady_window_s,
    tokens_arrived,
)
from analysis.metrics.server import (
    CONNECTION_COLUMNS,
    client_vs_server,
    connect_ms,
    connection_recorded,
    new_connection_share,
    resent_total,
    server_itl_ms,
    server_prefill_ms,
)

__all__ = [
    "CONNECTION_COLUMNS",
    "PERCENTILE_METHOD",
    "SLO_METRICS",
    "TOKEN_AGREEMENT_COLUMNS",
    "Arrivals",
    "BoolArray",
    "ChunkArrays",
    "FloatArray",
    "Gaps",
    "IntArray",
    "Timeline",
    "Window",
    "chunk_gaps",
    "client_vs_server",
    "completed_in",
    "connect_ms",
    "connection_recorded",
    "e2e_ms",
    "e2e_sched_ms",
    "epoch_ns",
    "error_rates",
    "failure_kind",
    "goodput",
    "in_flight_max",
    "in_flight_mean",
    "itl_per_chunk_ms",
    "itl_per_token_ms",
    "level_window",
    "max_itl_ms",
    "meets_slos",
    "new_connection_share",
    "of_frame",
    "output_speed_tps",
    "output_token_rate",
    "per_request_values",
    "per_token_values",
    "percentile",
    "ptr_of",
    "request_rate",
    "resent_total",
    "server_itl_ms",
    "server_prefill_ms",
    "steady_window_s",
    "token_agreement",
    "tokens_arrived",
    "tpot_ms",
    "ttfat_ms",
    "ttft_ms",
    "ttft_sched_ms",
]
