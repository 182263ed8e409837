"""Requests with `n > 1` choices, measured per choice: each choice is its own series of chunks,
so its gaps (ITL) and its time per output token (TPOT) are the choice's own; a request's chunk
choice indices (`chunk_choices`, empty when every chunk is choice 0) say which chunk is whose.

The statistics, beside their formulas (loadgen/results/formulas.py points here):
- ITL: one sample per token, taken within its choice (a gap is between two consecutive
  token-carrying chunks *of the same choice*); every choice's samples are the request's, so a
  token-level SLO keeps the request as the sampling unit (its choices share its conditions).
- TPOT of a choice: (its last token-carrying chunk's arrival - its first) / (its tokens - 1),
  defined for a choice with > 1 token; of the request, the mean over its choices that have one
  (each choice one replicate of the request's decode, weighted equally). The stream's end is
  not a choice's end (choices finish at different times), so a choice ends at its last token.
- TTFT: the first token of any choice (loadgen/engine/fold.py stamps it so); tokens per choice are
  the choice's chunk tokens.
Where `chunk_choices` is empty (n = 1, rows stored before deploy/sql/0190) every formula is
the single-series one of loadgen/results/formulas.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.integer[Any]]


def has_choices(choices: Any) -> bool:
    """Whether a request's chunk choice indices name more than choice 0."""
    return choices is not None and len(choices) > 0 and bool(np.any(np.asarray(choices) != 0))


def choice_order(choices: IntArray) -> npt.NDArray[np.intp]:
    """The chunks' order grouped by choice, arrival order kept within a choice."""
    return np.argsort(np.asarray(choices, dtype=np.int64), kind="stable")


def per_choice_gaps(
    offsets_us: IntArray, tokens: IntArray, choices: IntArray
) -> tuple[IntArray, IntArray]:
    """loadgen.results.formulas.token_gaps of each choice, concatenated (choice by choice): the gaps
    between consecutive token-carrying chunks of the same choice, and the tokens after each."""
    order = choice_order(choices)
    off, tok, ch = offsets_us[order], tokens[order], np.asarray(choices)[order]
    keep = tok > 0
    off, tok, ch = off[keep], tok[keep], ch[keep]
    same = ch[1:] == ch[:-1]
    return (off[1:] - off[:-1])[same], tok[1:][same]


def tokens_per_choice(tokens: IntArray, choices: IntArray) -> dict[int, int]:
    """Each choice's tokens (its chunks' tokens summed), by choice index."""
    out: dict[int, int] = {}
    for c, k in zip(np.asarray(choices).tolist(), np.asarray(tokens).tolist(), strict=True):
        out[int(c)] = out.get(int(c), 0) + int(k)
    return out


def choice_tpot_ms(offsets_us: IntArray, tokens: IntArray, choices: IntArray) -> list[float]:
    """Each choice's TPOT (ms), for the choices with > 1 token: (last token-carrying chunk's
    offset - first's) / (tokens - 1) / 1e3."""
    order = choice_order(choices)
    off, tok, ch = offsets_us[order], tokens[order], np.asarray(choices)[order]
    keep = tok > 0
    off, tok, ch = off[keep].astype(np.float64), tok[keep], ch[keep]
    out: list[float] = []
    if not ch.size:
        return out
    starts = np.flatnonzero(np.r_[True, ch[1:] != ch[:-1]])
    ends = np.r_[starts[1:], ch.size]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        k = int(tok[a:b].sum())
        if k > 1:
            out.append(float(off[b - 1] - off[a]) / (k - 1) / 1e3)
    return out


def request_tpot_ms(offsets_us: IntArray, tokens: IntArray, choices: IntArray) -> float:
    """A request's TPOT over its choices: the mean of choice_tpot_ms (NaN if no choice has
    more than one token)."""
    per = choice_tpot_ms(offsets_us, tokens, choices)
    if not per:
        return float("nan")
    total = 0.0
    for v in per:  # summed in choice order, one addition at a time: as SQL's avg (TPOT_SQL)
        total += v
    return total / len(per)


TPOT_SQL = (
    "(SELECT avg(t ORDER BY c) FROM (SELECT c, (max(o) - min(o))::float8 / (sum(k) - 1) / 1e3 AS t"
    " FROM unnest(chunk_offsets_us, chunk_tokens, chunk_choices) AS u(o, k, c) WHERE k > 0"
    " GROUP BY c HAVING sum(k) > 1) AS per_choice)"
)
"""request_tpot_ms in SQL over a `requests` row with chunk_choices (loadgen.results.formulas.TPOT's
SQL form uses it there; a choice's offsets only grow, so its first and last are its min and max)."""


def n_choices(choices: Any) -> int:
    """How many choices a request's chunks name (1 when `chunk_choices` is empty)."""
    if choices is None or len(choices) == 0:
        return 1
    return int(np.unique(np.asarray(choices)).size)


def grouped_order(
    owner: IntArray, choices: IntArray
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """Many requests' chunks at once (`owner[j]` the request of chunk j, in request order):
    the order that groups each request's chunks by choice (arrival order kept within one), and
    per chunk in that order its series key (one per request and choice)."""
    ch = np.asarray(choices, dtype=np.int64)
    width = int(ch.max()) + 1 if ch.size else 1
    key = np.asarray(owner, dtype=np.int64) * width + ch
    order = np.argsort(key, kind="stable")
    return order, key[order]
