"""Per-token (or per-chunk) ITL percentile spectra of many groups of requests at once, exact,
straight from the flat chunk arrays (analysis.stats.grouped's passes): the ITL curves of
analysis.stats.percentiles and the ITL columns of analysis.reports.summary.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from analysis import metrics as m
from analysis.stats import grouped
from analysis.stats.ranks import KEY_SHIFT, float_key


def level_region_spectra(
    chunks: m.ChunkArrays,
    labels: np.ndarray,
    levels: list[int],
    regions: list[str],
    grid: np.ndarray,
    confidence: float,
    resamples: int,
    seed: int,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per-token ITL spectra keyed "level|all" and "level|region" (see `itl_group_spectra`), of
    request labels level_index * len(regions) + region_index (-1: left out)."""
    nreg = max(len(regions), 1)
    sets: dict[str, list[int]] = {}
    for i, lvl in enumerate(levels):
        sets[f"{lvl}|all"] = [i * nreg + j for j in range(nreg)]
        for j, r in enumerate(regions):
            sets[f"{lvl}|{r}"] = [i * nreg + j]
    return itl_group_spectra(
        chunks,
        labels,
        len(levels) * nreg,
        sets,
        grid,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def level_region_labels(
    rows: np.ndarray,
    level: np.ndarray,
    region: np.ndarray,
    levels: list[int],
    regions: list[str],
) -> tuple[np.ndarray, int, dict[str, list[int]]]:
    """Request labels level_index * len(regions) + region_index (-1 where `rows` is False),
    their count, and the sets "level|all" and "level|region" as lists of labels."""
    nreg = max(len(regions), 1)
    li = np.searchsorted(np.asarray(levels), level)
    ri = np.searchsorted(np.asarray(regions, dtype=object), region)
    labels = np.where(rows, li * nreg + ri, -1).astype(np.int32)
    sets: dict[str, list[int]] = {}
    for i, lvl in enumerate(levels):
        sets[f"{lvl}|all"] = [i * nreg + j for j in range(nreg)]
        for j, r in enumerate(regions):
            sets[f"{lvl}|{r}"] = [i * nreg + j]
    return labels, len(levels) * nreg, sets


def itl_group_spectra(
    chunks: m.ChunkArrays,
    labels: np.ndarray,
    n_labels: int,
    sets: dict[str, list[int]],
    grid: npt.ArrayLike,
    *,
    per_chunk: bool = False,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """ITL spectra (value, lower, upper, n) of each set of request labels (-1 = left out),
    exact, in three passes over the chunks (analysis.stats.grouped). Per token (default): a gap of g
    µs before a chunk of k tokens is the value g/k ms with weight k, as
    metrics.itl_per_token_ms; `per_chunk`: the value g ms with weight 1. `resamples=0`: no
    bands (NaN)."""
    off, tok = chunks.offsets_us, chunks.tokens
    pick: grouped.PickFn | None = None
    binning: grouped.CellBins | None = None
    key_scale = 1.0  # block values are the ITL ms times this (see grouped's `pick`)
    # one pass each over the offsets (the min and max) and the tokens, no temporaries
    off_lo, off_hi = (int(off.min()), int(off.max())) if off.size else (0, 0)
    if off.size and int(tok.min()) > 0:
        gap_labels = _GapLabels(chunks.ptr, labels)
        n = off.size - 1
        # gaps in the offsets' own integer type when they cannot overflow it
        narrow = off.dtype == np.int32 and off_lo >= 0
        key_scale = 1.0 if per_chunk else 1e3

        def block(i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            # key values: gap/k µs (one division; the ms values are a monotone function of it)
            k = tok[i + 1 : j + 1]
            gap = (
                off[i + 1 : j + 1] - off[i:j]
                if narrow
                else off[i + 1 : j + 1] - off[i:j].astype(np.int64)
            )
            lab = gap_labels.block(i, j)
            if per_chunk:
                return gap / 1e3, lab, np.ones(k.size, dtype=np.int64)
            return np.true_divide(gap, k, dtype=np.float64), lab, k

        def pick_at(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            k = tok[pos + 1]
            gap = off[pos + 1].astype(np.float64) - off[pos]
            if per_chunk:
                return gap / 1e3, gap_labels.at(pos), np.ones(k.size, dtype=np.int64)
            return gap / k / 1e3, gap_labels.at(pos), k

        pick = pick_at
        binning = _integer_bins(chunks, labels, n_labels, per_chunk, off_lo, off_hi)
    else:
        gp = m.chunk_gaps(chunks, labels >= 0, labels=labels)
        n = gp.gap_us.size

        def block(i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            k = gp.tokens[i:j]
            gap = gp.gap_us[i:j].astype(np.float64)
            if per_chunk:
                return gap / 1e3, gp.label[i:j], np.ones(k.size, dtype=np.int64)
            return gap / k / 1e3, gp.label[i:j], k

    # bounds every gap (ms); values beyond a bound stay exact (analysis.stats.grouped)
    vmax = max(float(off_hi), -float(off_lo)) / 1e3 * key_scale if off.size else None
    return grouped.spectra_from_blocks(
        n,
        block,
        n_labels,
        sets,
        grid,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        value_max=vmax,
        pick=pick,
        binning=binning,
    )


LINEAR_US = 1 << 16  # integer µs keys below this get a bin each; above, 4,096 bins an octave


def _integer_bins(
    chunks: m.ChunkArrays,
    labels: np.ndarray,
    n_labels: int,
    per_chunk: bool,
    lo_off: int,
    hi_off: int,
) -> grouped.CellBins | None:
    """Bins of the gaps by an integer key, with no float conversion for most gaps: the key is
    floor(gap_us / k) per token (the gap itself for k = 1, most chunks; `per_chunk`: the gap),
    non-decreasing in the ITL value; bin = key for 0 <= key < LINEAR_US (negatives: bin 0),
    above that the float's top bits (4,096 bins an octave, clamped to the gaps' bound), which
    only the few large keys compute. None when the bins would not fit the histogram.
    `lo_off`, `hi_off`: the offsets' min and max."""
    off, tok, ptr = chunks.offsets_us, chunks.tokens, chunks.ptr
    bound = max(hi_off - lo_off, 0)  # every gap's |value| (and floor(gap / k)) is at most this
    linear = min(LINEAR_US, bound + 1)
    log_lo = float_key(linear)
    n_log = float_key(bound) - log_lo + 1 if bound >= linear else 0
    nb = linear + n_log
    if (n_labels + 1) * nb >= 2**31:
        return None
    narrow = off.dtype == np.int32 and lo_off >= 0  # int32 differences cannot overflow
    # histogram row offset of each request's gaps: (label + 1) * nb, 0 for left-out requests
    row = (np.maximum(labels.astype(np.int64), -1) + 1) * nb

    def fill(i: int, j: int, out: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        lo, hi = i + 1, j + 1  # the chunks the gaps [i, j) end at
        if narrow:  # in int32, then widened: twice as fast as an int64 output
            np.copyto(out, np.subtract(off[lo:hi], off[i:j]))
        else:
            np.subtract(off[lo:hi], off[i:j], out=out, dtype=np.int64)
        r0 = int(np.searchsorted(ptr, lo, side="right")) - 1
        r1 = int(np.searchsorted(ptr, hi, side="left"))  # requests starting before hi
        starts, ends = np.clip(ptr[r0:r1], lo, hi), np.clip(ptr[r0 + 1 : r1 + 1], lo, hi)
        rows = np.repeat(row[r0:r1], ends - starts)
        first = ptr[r0:r1]
        first = first[(first >= lo) & (first < hi)] - lo  # a request's first chunk: no gap
        out[first] = 0
        rows[first] = 0
        k = tok[lo:hi]
        # positions of chunks of several tokens (few): indices, not masks, are cheap here
        heavy = np.zeros(0, dtype=np.intp) if per_chunk else np.flatnonzero(k > 1)
        if heavy.size:
            kh = k[heavy]
            out[heavy] //= kh
        odd = out.view(np.uint64) >= linear  # negative or beyond the linear bins
        if bool(odd.any()):
            big = out[odd]
            key = np.right_shift(big.astype(np.float64).view(np.int64), KEY_SHIFT)
            np.clip(key - log_lo, 0, max(n_log - 1, 0), out=key)
            out[odd] = np.where(big < 0, 0, linear + key)
        out += rows
        if not heavy.size:
            return None
        return out[heavy], kh.astype(np.int64) - 1

    return grouped.CellBins(nb, fill)


class _GapLabels:
    """The request label of each gap p (from chunk p to chunk p + 1): its request's label when
    both chunks belong to the same request, else -1; made per block or position, never for
    every chunk at once."""

    def __init__(self, ptr: np.ndarray, labels: np.ndarray) -> None:
        self.ptr = ptr
        small = labels.size == 0 or (int(labels.max()) < 2**15 and int(labels.min()) >= -(2**15))
        self.labels = labels.astype(np.int16 if small else np.int32)

    def block(self, i: int, j: int) -> np.ndarray:
        """Labels of the gaps i .. j - 1."""
        lo, hi = i + 1, j + 1  # the chunks the gaps end at
        ptr = self.ptr
        r0 = int(np.searchsorted(ptr, lo, side="right")) - 1
        r1 = int(np.searchsorted(ptr, hi, side="left"))  # requests starting before hi
        starts, ends = np.clip(ptr[r0:r1], lo, hi), np.clip(ptr[r0 + 1 : r1 + 1], lo, hi)
        out = np.repeat(self.labels[r0:r1], ends - starts)
        first = ptr[r0:r1]
        out[first[(first >= lo) & (first < hi)] - lo] = -1  # a request's first chunk
        return out

    def at(self, pos: np.ndarray) -> np.ndarray:
        """Labels of the gaps at positions `pos`."""
        owner = np.searchsorted(self.ptr, pos + 1, side="right") - 1
        return np.where(self.ptr[owner] == pos + 1, -1, self.labels[owner]).astype(
            self.labels.dtype
        )
