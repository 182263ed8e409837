"""Full percentile spectra (p0 … p99.99 on a log-scaled tail axis, like HdrHistogram's plots),
exact from raw rows and pooled across shards and regions, with percentile-bootstrap confidence
bands (computed exactly: the limit of infinitely many replicates, see `bootstrap_band`); per
metric, level and region. Percentiles are numpy `method="linear"`; large arrays use an exact
O(n) selection (`exact_percentiles`) that returns the same numbers as np.percentile.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis import metrics as m
from analysis.stats import itl_spectra
from analysis.stats.ranks import KEY_SHIFT, band_from, band_sample_ranks, lerp, linear_ranks
from analysis.stats.ranks import band_ranks as band_ranks  # part of this module's band API

STEPS_PER_DECADE = 10
TAIL_DECADES = 4  # up to 1 - 10^-4: p99.99


def tail_grid(steps_per_decade: int = STEPS_PER_DECADE, decades: int = TAIL_DECADES) -> np.ndarray:
    """Percentiles at 1 - 10^(-j/steps) for j = 0 … decades·steps (p0, …, p90, …, p99, …,
    p99.99), plus the usual 25/50/75/95/99.5/99.95 marks; sorted, in percent."""
    j = np.arange(decades * steps_per_decade + 1)
    q = 100.0 * (1.0 - 10.0 ** (-j / steps_per_decade))
    marks = [25.0, 50.0, 75.0, 95.0, 99.5, 99.95]
    return np.unique(np.round(np.concatenate([q, marks]), 10))


def tail_x(percentiles: npt.ArrayLike) -> np.ndarray:
    """The log axis coordinate 1 / (1 - q/100) (1 at p0, 10 at p90, 100 at p99, …)."""
    q = np.asarray(percentiles, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 - q / 100.0)


_SELECT_MIN = 2_000_000  # below this a full sort is as fast
_BLOCK = 1 << 20  # elements per pass: small temporaries, reused (big ones page-fault)


def _blocks(n: int) -> range:
    return range(0, n, _BLOCK)


def order_statistics(values: np.ndarray, ranks: npt.ArrayLike) -> np.ndarray:
    """The values at 0-based `ranks` of sorted(`values`) (finite float64), exactly. For large
    arrays of non-negative values, in O(n): ranks are located by counting keys made of each
    float's top bits (monotone for values >= 0: sign, exponent, top 12 mantissa bits), and only
    the values in the few bins holding wanted ranks are sorted. Works block by block."""
    r = np.asarray(ranks, dtype=np.int64)
    n = values.size
    if n < _SELECT_MIN or values.min() < 0:
        return np.sort(values)[r]
    uniq, inverse = np.unique(r, return_inverse=True)
    bits = values.view(np.int64)
    kmin = int(bits.min() >> KEY_SHIFT)
    nbins = int(bits.max() >> KEY_SHIFT) - kmin + 1
    counts = np.zeros(nbins, dtype=np.int64)
    buf = np.empty(_BLOCK, dtype=np.int64)
    for i in _blocks(n):
        k = buf[: min(_BLOCK, n - i)]
        np.right_shift(bits[i : i + _BLOCK], KEY_SHIFT, out=k)
        k -= kmin
        counts += np.bincount(k, minlength=nbins)
    cum = np.cumsum(counts)
    bins = np.searchsorted(cum, uniq, side="right")  # the bin holding each rank
    wanted = np.zeros(nbins, dtype=bool)
    wanted[bins] = True
    picked = []
    for i in _blocks(n):
        k = buf[: min(_BLOCK, n - i)]
        np.right_shift(bits[i : i + _BLOCK], KEY_SHIFT, out=k)
        k -= kmin
        picked.append(values[i : i + _BLOCK][wanted[k]])
    sub = np.sort(np.concatenate(picked))
    sub_key = (sub.view(np.int64) >> KEY_SHIFT) - kmin
    before = np.where(bins > 0, cum[np.maximum(bins - 1, 0)], 0)  # values in earlier bins
    found = sub[np.searchsorted(sub_key, bins, side="left") + (uniq - before)]
    return np.asarray(found[inverse], dtype=np.float64)


def _finite(values: npt.ArrayLike) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if all(np.isfinite(v[i : i + _BLOCK]).all() for i in _blocks(v.size)):
        return v
    return v[np.isfinite(v)]


def exact_percentiles(values: npt.ArrayLike, q: npt.ArrayLike) -> np.ndarray:
    """np.percentile(values, q, method="linear") of the finite values (same numbers), in O(n)
    for large arrays (see `order_statistics`)."""
    v = _finite(values)
    qs = np.asarray(q, dtype=np.float64)
    if v.size == 0:
        return np.full(qs.shape, np.nan)
    if v.size < _SELECT_MIN:
        return np.asarray(np.percentile(v, qs, method="linear"), dtype=np.float64)
    lo, hi, t = linear_ranks(v.size, qs)
    stats = order_statistics(v, np.concatenate([lo.ravel(), hi.ravel()]))
    a, b = stats[: lo.size].reshape(lo.shape), stats[lo.size :].reshape(lo.shape)
    return lerp(a, b, t)


def sorted_percentiles(ordered: np.ndarray, q: npt.ArrayLike) -> np.ndarray:
    """np.percentile(ordered, q, method="linear") of values sorted ascending already (finite,
    not checked; NaN when there are none), without sorting them again."""
    qs = np.asarray(q, dtype=np.float64)
    if ordered.size == 0:
        return np.full(qs.shape, np.nan)
    lo, hi, t = linear_ranks(ordered.size, qs)
    return lerp(ordered[lo], ordered[hi], t)


def bootstrap_band(
    values: npt.ArrayLike,
    q: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    exact: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile-bootstrap bands (lower, upper) for percentiles `q` of `values`.

    In a resample of size n, the order statistic at rank r is F̂⁻¹(U₍ᵣ₎) with
    U₍ᵣ₎ ~ Beta(r, n + 1 - r) and F̂⁻¹(u) = x₍⌈nu⌉₎ (the sorted data); r is the (fractional)
    1-based linear-interpolation rank 1 + (n - 1)·q/100. F̂⁻¹ is monotone, so the a-quantile of
    the bootstrap distribution is F̂⁻¹(B⁻¹(a)) exactly: `exact` (the default) takes it, which
    is the band infinitely many replicates would converge to, at the cost of two order
    statistics per percentile and with no Monte Carlo noise. `exact=False` draws `resamples`
    Beta variates per percentile (seeded) and takes the band's quantiles of those replicates."""
    v = _finite(values)
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if v.size == 0:
        nan = np.full(qs.shape, np.nan)
        return nan, nan.copy()
    idx = band_sample_ranks(v.size, qs, confidence, resamples, exact, seed)
    return band_from(order_statistics(v, idx.ravel()), idx.shape, confidence, exact)


def spectrum(
    values: npt.ArrayLike,
    grid: Sequence[float] | np.ndarray | None = None,
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    exact: bool = True,
) -> pd.DataFrame:
    """One row per percentile: percentile, x (= 1/(1-q)), value, lower, upper, n. The band is
    `bootstrap_band`'s (exact by default); `resamples=0`: no band (NaN)."""
    g = tail_grid() if grid is None else np.asarray(grid, dtype=np.float64)
    v = _finite(values)
    lower = upper = np.full(g.shape, np.nan)
    if v.size == 0:
        value = np.full(g.shape, np.nan)
    else:  # one sort (or selection pass) for the percentiles and the band
        lo, hi, t = linear_ranks(v.size, g)
        idx = (
            band_sample_ranks(v.size, g, confidence, resamples, exact, seed)
            if resamples > 0
            else np.zeros((0, g.size), dtype=np.int64)
        )
        stats = order_statistics(v, np.concatenate([lo, hi, idx.ravel()]))
        value = lerp(stats[: g.size], stats[g.size : 2 * g.size], t)
        if resamples > 0:
            lower, upper = band_from(stats[2 * g.size :], idx.shape, confidence, exact)
    return pd.DataFrame(
        {
            "percentile": g,
            "x": tail_x(g),
            "value": value,
            "lower": lower,
            "upper": upper,
            "n": int(v.size),
        }
    )


CURVE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms", "ttft_sched_ms",
                 "ttfab_ms", "audio_rtf")  # fmt: skip
DEFAULT_CURVES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def percentile_curves(
    df: pd.DataFrame,
    chunks: m.ChunkArrays | None = None,
    *,
    metrics: Sequence[str] = DEFAULT_CURVES,
    by_region: bool = True,
    grid: Sequence[float] | np.ndarray | None = None,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Long table of spectra: metric, level, region ("all" = pooled over regions), then the
    columns of `spectrum`. Samples are ok requests in the steady phase; `itl_ms` is per token.
    Bands are `bootstrap_band`'s exact ones (`resamples` > 0 switches them on; 0: none)."""
    ok = ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy()
    level = df["level"].to_numpy()
    rc, regions = sorted_codes(df["region"])
    levels = sorted(set(level.tolist()))
    g = tail_grid() if grid is None else np.asarray(grid, dtype=np.float64)
    itl: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
    if "itl_ms" in metrics:
        ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
        li = np.searchsorted(np.asarray(levels), level)
        labels = np.where(ok, li * max(len(regions), 1) + rc, -1).astype(np.int32)
        itl = itl_spectra.level_region_spectra(
            ch, labels, levels, regions, g, confidence, resamples, seed
        )
    per_req = {k: m.per_request_values(df, k) for k in metrics if k != "itl_ms"}
    spectra: dict[tuple[int, str, str], pd.DataFrame] = {}
    order: list[tuple[int, str, str]] = []
    for lvl in levels:
        in_level = level == lvl
        present = np.unique(rc[in_level]).tolist() if by_region else []
        groups = [("all", ok & in_level)]
        if len(present) > 1:
            groups += [(regions[j], ok & in_level & (rc == j)) for j in present]
        for name, rows in groups:
            for metric in metrics:
                order.append((lvl, name, metric))
                if metric != "itl_ms":
                    spectra[(lvl, name, metric)] = spectrum(
                        per_req[metric][rows],
                        g,
                        confidence=confidence,
                        resamples=resamples,
                        seed=seed,
                    )
    parts = []
    for lvl, name, metric in order:
        if metric == "itl_ms":
            value, lower, upper, n = itl[f"{lvl}|{name}"]
            s = pd.DataFrame(
                {
                    "percentile": g,
                    "x": tail_x(g),
                    "value": value,
                    "lower": lower,
                    "upper": upper,
                    "n": n,
                }
            )
        else:
            s = spectra[(lvl, name, metric)]
        s.insert(0, "region", name)
        s.insert(0, "level", int(lvl))
        s.insert(0, "metric", metric)
        parts.append(s)
    if not parts:
        return pd.DataFrame(
            columns=["metric", "level", "region", "percentile", "x", "value", "lower", "upper", "n"]
        )
    return pd.concat(parts, ignore_index=True)


def sorted_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Codes (int64) of a text column into its distinct values, sorted (as
    sorted(set(values)) would give them), without comparing Python strings per row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy().astype(np.int64)
        cats = [str(c) for c in col.cat.categories]
    else:
        raw, uniques = pd.factorize(col.astype(object))
        codes, cats = raw.astype(np.int64), [str(c) for c in uniques]
    present = np.unique(codes[codes >= 0]).tolist()
    names = sorted(cats[i] for i in present)
    lut = np.full(len(cats) + 1, -1, dtype=np.int64)  # index -1 (missing) stays -1
    for i in present:
        lut[i] = names.index(cats[i])
    return lut[codes], names
