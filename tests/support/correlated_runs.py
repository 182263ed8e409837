"""Synthetic runs with realistic within-request correlation, for the calibration tests of the SLA
verdicts, the saturation search and `compare` (issue #21): pure numpy/pandas, seeded, exact by
construction where a test needs a known truth. Frames are shaped like analysis.store.load's
request frame (tests/analysis/storedata.frame) with their analysis.metrics.ChunkArrays.

The model, per level (`LevelModel`), for request i of a level:
- TTFT_i = ttft_median * exp(ttft_sigma * Z_i), Z_i ~ N(0, 1): lognormal, one per request,
  independent between requests (or correlated with the request's ITL level: `ttft_level_corr`,
  a Gaussian copula, which leaves the TTFT marginal lognormal).
- Its ITL level: B_i ~ N(0, level_sigma^2), a between-request random effect (a slow slot,
  a crowded batch, a long network path): every gap of the request shares it.
- Its gaps, j = 1..m_i (m_i + 1 chunks of `tokens_per_chunk` tokens; m_i + 1 uniform on
  `chunks`): log gap_ij = log(tokens_per_chunk * itl_median) + B_i + E_ij (+ log S_ij), where
  E_ij is a stationary AR(1): E_i1 ~ N(0, within_sigma^2), E_ij = ar_phi E_i,j-1 +
  sqrt(1 - ar_phi^2) within_sigma W_ij (so every E_ij is N(0, within_sigma^2)).
- Stalls (a heavy tail clustered in some requests): a request is stall-prone with probability
  `stall_requests`; in a stall-prone request each gap is a stall with probability `stall_rate`;
  a stall multiplies the gap by S_ij = stall_median * exp(stall_sigma * V_ij), V_ij ~ N(0, 1).
- Failures: with probability `failure_rate` a request fails instead (`failure_outcome`, HTTP 503,
  no tokens); requests are sent `send_delay_ms` (uniform 0..) after their scheduled time,
  scheduled evenly over the level's `duration_s`.

A gap's marginal is then a two-component lognormal mixture, independent of m_i, so the pooled
per-token ITL (every token of every ok request; analysis.metrics.itl_per_token_ms divides a
chunk's gap by its tokens) has the exceedance fraction `itl_exceedance(model, x)` exactly, in
closed form (up to the µs rounding of stored offsets), and the same holds for the ratio
"exceeding tokens / tokens" over requests in expectation. `with_ttft_quantile` and
`with_itl_quantile` rescale a model so that its true p`q` is exactly `x` (the boundary of a
claim); `reference_itl_quantile` checks it by a large sample.

Use `draw(model, rng)` (arrays only: fast, for thousands of simulated runs), `draw_frame(models,
seed)` (a frame and its chunks, as analysis.verdicts.sla.evaluate takes them) or `run_rows(...)`
(storedata dicts for tests/analysis/storedata.insert_run).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import optimize, stats

from analysis.metrics import ChunkArrays
from tests.analysis import storedata as sd

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class LevelModel:
    """One level's generative model (see the module docstring); times in ms."""

    requests: int = 200
    ttft_median: float = 200.0
    ttft_sigma: float = 0.4
    ttft_level_corr: float = 0.0
    itl_median: float = 20.0
    level_sigma: float = 0.25
    within_sigma: float = 0.15
    ar_phi: float = 0.8
    stall_requests: float = 0.0
    stall_rate: float = 0.05
    stall_median: float = 6.0
    stall_sigma: float = 0.5
    chunks: tuple[int, int] = (50, 300)  # chunks per request, uniform, both ends included
    tokens_per_chunk: int = 1
    failure_rate: float = 0.0
    failure_outcome: str = "http_error"
    send_delay_ms: float = 0.2
    kind: str = "concurrency"
    value: float = 8.0
    duration_s: float = 30.0

    def __post_init__(self) -> None:
        if not 2 <= self.chunks[0] <= self.chunks[1]:
            raise ValueError("chunks: need 2 <= min <= max")
        if not -1.0 < self.ar_phi < 1.0 or not -1.0 <= self.ttft_level_corr <= 1.0:
            raise ValueError("ar_phi must be in (-1, 1), ttft_level_corr in [-1, 1]")


# ---------------------------------------------------------------- exact truths


def ttft_exceedance(model: LevelModel, x: float) -> float:
    """P(TTFT >= x) of one request of `model` (exact)."""
    return float(stats.norm.sf(math.log(x / model.ttft_median) / model.ttft_sigma))


def itl_exceedance(model: LevelModel, x: float) -> float:
    """P(per-token ITL >= x) of one token of `model`, pooled over tokens (exact)."""
    sd0 = math.hypot(model.level_sigma, model.within_sigma)
    sd1 = math.hypot(sd0, model.stall_sigma)
    z = math.log(x / model.itl_median)
    p_stall = model.stall_requests * model.stall_rate
    plain = float(stats.norm.sf(z / sd0))
    stalled = float(stats.norm.sf((z - math.log(model.stall_median)) / sd1))
    return (1.0 - p_stall) * plain + p_stall * stalled


def with_ttft_quantile(model: LevelModel, q: float, x: float) -> LevelModel:
    """`model` with its TTFT rescaled so that its true p`q` (0..100) is exactly `x` ms."""
    median = x / math.exp(model.ttft_sigma * float(stats.norm.ppf(q / 100.0)))
    return dataclasses.replace(model, ttft_median=median)


def with_itl_quantile(model: LevelModel, q: float, x: float) -> LevelModel:
    """`model` with its gaps rescaled so that its true pooled per-token p`q` is exactly `x` ms
    (P(ITL >= x) = 1 - q/100, solved in closed form; the gap shape is unchanged)."""
    target = 1.0 - q / 100.0

    def excess(log_median: float) -> float:
        return itl_exceedance(dataclasses.replace(model, itl_median=math.exp(log_median)), x) - (
            target
        )

    lo, hi = math.log(x) - 50.0, math.log(x) + 5.0
    log_median = optimize.brentq(excess, lo, hi, xtol=1e-13, rtol=1e-15)
    return dataclasses.replace(model, itl_median=math.exp(log_median))


def reference_itl_quantile(model: LevelModel, q: float, *, requests: int, seed: int) -> float:
    """The pooled per-token p`q` of one large draw of `requests` ok requests (a check of the
    closed form, by a reference sample)."""
    big = dataclasses.replace(model, requests=requests, failure_rate=0.0)
    d = draw(big, np.random.default_rng(seed))
    return float(np.percentile(d.itl_ms(), q))


# ---------------------------------------------------------------- draws


@dataclass(frozen=True, slots=True)
class Draw:
    """One level's requests as arrays: `ok` per request, `ttft_ms` (NaN for failures), the
    chunks (µs from send, `tokens_per_chunk` tokens each; failures own none) and `send_ns`."""

    model: LevelModel
    ok: npt.NDArray[np.bool_]
    ttft_ms: FloatArray
    chunks: ChunkArrays
    send_ns: IntArray

    def gaps_us(self) -> tuple[IntArray, IntArray]:
        """Every gap (µs) and the index of its request."""
        lengths = np.diff(self.chunks.ptr)
        owner = np.repeat(np.arange(self.chunks.n_requests), lengths)
        same = owner[1:] == owner[:-1]
        return np.diff(self.chunks.offsets_us)[same].astype(np.int64), owner[1:][same]

    def itl_ms(self) -> FloatArray:
        """Per-token ITL (ms), pooled (a gap of k tokens gives k samples of gap/k)."""
        g, _ = self.gaps_us()
        k = self.model.tokens_per_chunk
        return np.repeat(g.astype(np.float64) / (1e3 * k), k)


def draw(model: LevelModel, rng: np.random.Generator) -> Draw:
    """One level of `model`, from `rng`."""
    n = model.requests
    ok = rng.random(n) >= model.failure_rate
    level = rng.standard_normal(n)
    zt = rng.standard_normal(n)
    rho = model.ttft_level_corr
    ttft = model.ttft_median * np.exp(model.ttft_sigma * (rho * level + math.sqrt(1 - rho**2) * zt))
    n_chunks = rng.integers(model.chunks[0], model.chunks[1] + 1, n)
    n_chunks[~ok] = 0
    m = np.maximum(n_chunks - 1, 0)
    width = int(m.max()) if n else 0
    # AR(1) log-gaps, stationary from the first gap, as an (n, width) matrix, masked by m
    e = np.empty((n, width))
    w = rng.standard_normal((n, width))
    if width:
        e[:, 0] = model.within_sigma * w[:, 0]
        s = math.sqrt(1.0 - model.ar_phi**2) * model.within_sigma
        for j in range(1, width):
            e[:, j] = model.ar_phi * e[:, j - 1] + s * w[:, j]
    log_gap = (
        math.log(model.itl_median * model.tokens_per_chunk) + model.level_sigma * level[:, None] + e
    )
    prone = rng.random(n) < model.stall_requests
    stall = (rng.random((n, width)) < model.stall_rate) & prone[:, None]
    v = rng.standard_normal((n, width))
    log_gap += np.where(stall, math.log(model.stall_median) + model.stall_sigma * v, 0.0)
    valid = np.arange(width)[None, :] < m[:, None]
    gaps_us = np.rint(np.exp(log_gap[valid]) * 1e3).astype(np.int64)
    gaps_us = np.maximum(gaps_us, 1)
    first_us = np.rint(ttft * 1e3).astype(np.int64)
    # chunk offsets: the first at TTFT, then cumulative gaps, request by request
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_chunks, out=ptr[1:])
    gptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(m, out=gptr[1:])
    steps = np.zeros(int(ptr[-1]), dtype=np.int64)
    has = n_chunks > 0
    steps[ptr[:-1][has]] = first_us[has]
    # gap j of request i is the step into chunk ptr[i] + 1 + j
    pos = np.repeat(ptr[:-1] + 1, m) + (np.arange(int(gptr[-1])) - np.repeat(gptr[:-1], m))
    steps[pos] = gaps_us
    running = np.cumsum(steps)
    start = np.zeros(n, dtype=np.int64)  # the running sum before each request's first chunk
    start[has] = running[ptr[:-1][has]] - steps[ptr[:-1][has]]
    offsets = running - np.repeat(start, n_chunks)
    tokens = np.full(offsets.size, model.tokens_per_chunk, dtype=np.int64)
    send_ns = np.rint(rng.random(n) * model.send_delay_ms * 1e6).astype(np.int64)
    return Draw(
        model=model,
        ok=ok,
        ttft_ms=np.where(ok, first_us / 1e3, np.nan),
        chunks=ChunkArrays(offsets_us=offsets, tokens=tokens, ptr=ptr),
        send_ns=send_ns,
    )


# ---------------------------------------------------------------- rows and frames


def _rows(run_id: str, draws: Sequence[Draw], t0: dt.datetime) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    i = 0
    start_s = 0.0
    for lvl, d in enumerate(draws):
        mdl = d.model
        ptr = d.chunks.ptr
        for r in range(mdl.requests):
            sched = t0 + dt.timedelta(seconds=start_s + r * mdl.duration_s / mdl.requests)
            over: dict[str, Any] = {"scheduled_at": sched, "level": lvl}
            sent = int(d.send_ns[r])
            if d.ok[r]:
                offs = d.chunks.offsets_us[ptr[r] : ptr[r + 1]]
                toks = d.chunks.tokens[ptr[r] : ptr[r + 1]]
                rows.append(
                    sd.streamed(
                        run_id,
                        i,
                        sent_ns=sent,
                        offsets_us=offs.tolist(),
                        tokens=toks.tolist(),
                        usage_completion_tokens=int(toks.sum()),
                        max_tokens=int(toks.sum()),
                        **over,
                    )
                )
            else:
                rows.append(
                    sd.request_row(
                        run_id,
                        i,
                        outcome=mdl.failure_outcome,
                        http_status=503 if mdl.failure_outcome == "http_error" else None,
                        sent_ns=sent,
                        end_ns=sent + 3 * sd.MS,
                        **over,
                    )
                )
            i += 1
        start_s += mdl.duration_s
    return rows


def draw_frame(
    models: Sequence[LevelModel], seed: int, run_id: str = "corr-run"
) -> tuple[pd.DataFrame, ChunkArrays, list[Draw]]:
    """A whole run of `models` (one level each, in order), seeded: its request frame (shaped
    like analysis.store.load.load_requests), its chunks, and the draws."""
    rng = np.random.default_rng(seed)
    draws = [draw(mdl, rng) for mdl in models]
    df = sd.frame(_rows(run_id, draws, sd.T0))
    return df, ChunkArrays.from_frame(df), draws


def run_rows(
    run_id: str, models: Sequence[LevelModel], seed: int, **run_over: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(run, levels, requests) rows for tests/analysis/storedata.insert_run."""
    rng = np.random.default_rng(seed)
    draws = [draw(mdl, rng) for mdl in models]
    reqs = _rows(run_id, draws, sd.T0)
    levels = []
    start = 0.0
    for lvl, mdl in enumerate(models):
        levels.append(
            sd.level_row(
                run_id,
                lvl,
                kind=mdl.kind,
                value=mdl.value,
                duration_s=mdl.duration_s,
                started_at=sd.T0 + dt.timedelta(seconds=start),
            )
        )
        start += mdl.duration_s
    run = sd.run_row(
        run_id,
        requests_scheduled=len(reqs),
        ended_at=sd.T0 + dt.timedelta(seconds=start),
        **run_over,
    )
    return run, levels, reqs
