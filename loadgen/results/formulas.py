"""Each per-request metric's one formula, over a request's stored fields (the `requests` columns
of loadgen.results.storeformat, which loadgen.results.records.RequestRecord's fields are named
after): its Python form, vectorised (float64 arrays, NaN for NULL), and beside it its SQL form over
the `requests` table where the store computes it (NULL where the Python form gives NaN). Everything
that computes a metric uses these: analysis.metrics (over frames), analysis.verdicts.nightly and
analysis.stats.regions (SQL), the saturation search's samples (loadgen.engine.fold) and the figures
told to Locust (loadgen.locust.engine). tests/analysis/test_formula_parity.py checks each SQL form
against the Python form on stored rows.

Clocks: `*_ns` are ns on the measuring host's monotonic clock from the request's *scheduled*
time; chunk offsets are µs from *send*. Latencies are in ms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.results.choices import TPOT_SQL, has_choices, per_choice_gaps

FloatArray = npt.NDArray[np.float64]
NS_PER_MS = 1e6
US_PER_MS = 1e3


@dataclass(frozen=True, slots=True)
class RequestMetric:
    """One per-request metric: its name and unit, the stored columns its formula reads (in the
    order `python` takes them), the Python form, the SQL form (a float8 expression over those
    columns of `requests`, in IEEE arithmetic as numpy's, so both give the same numbers) and
    the one-line definition reports print (analysis.reports.summary's `definitions`)."""

    name: str
    unit: str
    columns: tuple[str, ...]
    python: Callable[..., FloatArray]
    sql: str
    definition: str

    def of_record(self, rec: Any) -> float:
        """The metric of one request record (attributes named as the columns; None = NULL):
        a float, NaN where it has no value (the Python form on float64 scalars)."""
        args = [np.float64(np.nan if (x := getattr(rec, c)) is None else x) for c in self.columns]
        return float(self.python(*args))


def ttft_ms(first_token_ns: FloatArray, sent_ns: FloatArray) -> FloatArray:
    """Time to first token from send: (first_token_ns - sent_ns) / 1e6. The first token is the
    first non-empty content *or* reasoning delta. This is the TTFT the summary reports."""
    return (first_token_ns - sent_ns) / NS_PER_MS


TTFT = RequestMetric(
    "ttft_ms",
    "ms",
    ("first_token_ns", "sent_ns"),
    ttft_ms,
    "(first_token_ns - sent_ns)::float8 / 1e6",
    "first_token_ns - sent_ns (from send; first content or reasoning delta), ms",
)


def ttft_sched_ms(first_token_ns: FloatArray) -> FloatArray:
    """TTFT from the scheduled time: first_token_ns / 1e6 (includes any late send: shows
    coordinated omission)."""
    return first_token_ns / NS_PER_MS


TTFT_SCHED = RequestMetric(
    "ttft_sched_ms",
    "ms",
    ("first_token_ns",),
    ttft_sched_ms,
    "first_token_ns::float8 / 1e6",
    "first_token_ns (from the scheduled time), ms",
)


def ttfat_ms(first_answer_ns: FloatArray, sent_ns: FloatArray) -> FloatArray:
    """Time to first answer token from send: (first_answer_ns - sent_ns) / 1e6; for reasoning
    models the first content delta after the reasoning, else equal to TTFT."""
    return (first_answer_ns - sent_ns) / NS_PER_MS


TTFAT = RequestMetric(
    "ttfat_ms",
    "ms",
    ("first_answer_ns", "sent_ns"),
    ttfat_ms,
    "(first_answer_ns - sent_ns)::float8 / 1e6",
    "first_answer_ns - sent_ns (first answer token, after reasoning), ms",
)


def tpot_ms(
    end_ns: FloatArray, first_token_ns: FloatArray, output_tokens: FloatArray
) -> FloatArray:
    """Time per output token after the first: (end_ns - first_token_ns) / (output_tokens - 1) /
    1e6, defined only when output_tokens > 1 (NaN otherwise). For a request with `n > 1`
    choices (`chunk_choices` stored) the TPOT is per choice and the request's the mean over its
    choices: loadgen.results.choices.request_tpot_ms (this scalar form is the n = 1 one; the SQL
    form below is both)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (end_ns - first_token_ns) / (output_tokens - 1.0) / NS_PER_MS
    return np.where(output_tokens > 1, v, np.nan)


TPOT = RequestMetric(
    "tpot_ms",
    "ms",
    ("end_ns", "first_token_ns", "output_tokens"),
    tpot_ms,
    "CASE WHEN chunk_choices IS NOT NULL THEN " + TPOT_SQL + " WHEN output_tokens > 1 THEN "
    "(end_ns - first_token_ns)::float8 / (output_tokens - 1) / 1e6 END",
    "(end_ns - first_token_ns) / (output_tokens - 1), requests with >1 token (n > 1: each "
    "choice first to last token, the mean over choices), ms",
)


def e2e_ms(end_ns: FloatArray, sent_ns: FloatArray) -> FloatArray:
    """End-to-end latency from send: (end_ns - sent_ns) / 1e6. This is the E2E reported."""
    return (end_ns - sent_ns) / NS_PER_MS


E2E = RequestMetric(
    "e2e_ms",
    "ms",
    ("end_ns", "sent_ns"),
    e2e_ms,
    "(end_ns - sent_ns)::float8 / 1e6",
    "end_ns - sent_ns (from send), ms",
)


def e2e_sched_ms(end_ns: FloatArray) -> FloatArray:
    """End-to-end latency from the scheduled time: end_ns / 1e6."""
    return end_ns / NS_PER_MS


E2E_SCHED = RequestMetric(
    "e2e_sched_ms",
    "ms",
    ("end_ns",),
    e2e_sched_ms,
    "end_ns::float8 / 1e6",
    "end_ns (from the scheduled time), ms",
)


def output_speed_tps(
    end_ns: FloatArray, first_token_ns: FloatArray, output_tokens: FloatArray
) -> FloatArray:
    """Per-request output speed, tokens/s after the first token:
    (output_tokens - 1) / ((end_ns - first_token_ns) / 1e9), for output_tokens > 1 and a
    positive span (NaN otherwise). Equals 1000 / TPOT_ms."""
    span_s = (end_ns - first_token_ns) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (output_tokens - 1.0) / span_s
    return np.where((output_tokens > 1) & (span_s > 0), v, np.nan)


OUTPUT_SPEED = RequestMetric(
    "output_speed_tps",
    "tokens/s",
    ("end_ns", "first_token_ns", "output_tokens"),
    output_speed_tps,
    "CASE WHEN output_tokens > 1 AND end_ns > first_token_ns THEN "
    "(output_tokens - 1)::float8 / ((end_ns - first_token_ns)::float8 / 1e9) END",
    "(output_tokens - 1) / ((end_ns - first_token_ns) / 1e9), requests with >1 token and a "
    "positive span, tokens/s",
)

REQUEST_METRICS = {m.name: m for m in (TTFT, TTFT_SCHED, TTFAT, TPOT, E2E, E2E_SCHED, OUTPUT_SPEED)}
"""Every per-request metric with a formula over the stored scalar fields, by name."""


# ---------------------------------------------------------------- inter-token latency


def token_gaps(
    offsets_us: npt.NDArray[np.integer[Any]], tokens: npt.NDArray[np.integer[Any]]
) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.integer[Any]]]:
    """One request's gaps between consecutive chunks carrying tokens (> 0), from the first such
    chunk on: (gap µs before chunk j, tokens of chunk j). Chunks with no tokens (role-only,
    usage-only) are skipped; the first chunk's extra tokens have no gap (they arrived with
    the first token, which TTFT measures). analysis.metrics.chunk_gaps is this over many
    requests at once."""
    keep = tokens > 0
    off, tok = offsets_us[keep], tokens[keep]
    return off[1:] - off[:-1], tok[1:]


def per_token_gap_ms(
    gap_us: npt.NDArray[np.integer[Any]], tokens: npt.NDArray[np.integer[Any]]
) -> FloatArray:
    """The per-token ITL of a gap: a chunk carrying k tokens that arrived g µs after the previous
    token-carrying chunk gives each of its k tokens g / k / 1e3 ms."""
    return np.asarray(gap_us, dtype=np.float64) / tokens / US_PER_MS


def itl_per_token_ms(
    offsets_us: npt.NDArray[np.integer[Any]],
    tokens: npt.NDArray[np.integer[Any]],
    choices: npt.NDArray[np.integer[Any]] | None = None,
) -> FloatArray:
    """One request's per-token ITL samples (the ITL reported): per `token_gaps` gap, its k
    tokens' `per_token_gap_ms` (k samples). With `n > 1` choices (`choices`, one index per
    chunk) the gaps are within each choice: loadgen.results.choices.per_choice_gaps."""
    if choices is not None and has_choices(choices):
        gap, k = per_choice_gaps(offsets_us, tokens, choices)
    else:
        gap, k = token_gaps(offsets_us, tokens)
    return np.repeat(per_token_gap_ms(gap, k), k)


ITL_DEFINITION = "per token: a chunk of k tokens after a gap g gives k samples of g/k, ms"
"""`itl_per_token_ms` in one line, as reports print it."""
