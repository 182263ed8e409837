"""What the saturation search judges a level by (loadgen/engine/search.py): each steady request's
values, taken as `peakload sla` takes them from the store (the same formulas, the same misses),
with what the exit verdict's other criteria need: the outcome (the error budget) and whether it
was sent inside the steady window (the load shortfall)."""

from __future__ import annotations

import math

import numpy as np

from loadgen.results import audio_formulas, formulas
from loadgen.results.choices import request_tpot_ms
from loadgen.results.reasons import STOPPED_BY_PEAKLOAD
from loadgen.results.records import Outcome, Phase, RequestRecord

SAMPLED_FORMULAS = (
    formulas.TTFT,
    formulas.E2E,
    formulas.TTFAT,
    formulas.TPOT,
    audio_formulas.TTFAB,
    audio_formulas.AUDIO_RTF,
)
"""The per-request metrics the saturation search samples (with `itl_ms`, one sample a token)."""
SAMPLED = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms", "ttfab_ms", "audio_rtf")
"""The metrics the saturation search judges SLOs on: SAMPLED_FORMULAS' and `itl_ms`."""
TOKEN_METRICS = ("itl_ms",)
"""SAMPLED's token-level metrics (many samples a request): judged with the request as the unit."""
ITL_COUNTS = "itl_ms/request"
"""Per steady request, how many of the `itl_ms` samples are its own (in the same order: a
token-level SLO is judged with the request as the unit, loadgen/results/clustered.py)."""
OUTCOMES = "ok/request"
"""Per steady request (not those peakload stopped): 1.0 ok, 0.0 failed (the error budget)."""
DELIVERED = "sent_in_window/request"
"""Per steady request (not those peakload stopped): 1.0 if sent inside the steady window
(the load shortfall, loadgen/results/shortfall.py), else 0.0."""
SAMPLE_KEYS = (*SAMPLED, ITL_COUNTS, OUTCOMES, DELIVERED)
"""Every list a level's samples hold (loadgen.engine.levels makes them, loadgen.engine.pool pools
them)."""


def sample_metrics(
    samples: dict[str, list[float]], rec: RequestRecord, sent_in_window: bool = True
) -> None:
    """Per-request values the saturation search judges a level by, taken as `peakload sla`
    takes them: loadgen.results.formulas' values of ok steady requests where they have one,
    per-token ITL one sample a token (and the request's count of them); a failed steady request is a
    miss of every SLO, counted as one sample; the outcome and whether the request was sent
    inside the steady window. Requests peakload itself stopped never count."""
    if rec.phase is not Phase.STEADY:
        return
    if rec.outcome in (Outcome.CANCELLED, Outcome.NOT_SENT) and (
        rec.error_phase in STOPPED_BY_PEAKLOAD
    ):
        return
    samples.setdefault(OUTCOMES, []).append(1.0 if rec.outcome is Outcome.OK else 0.0)
    samples.setdefault(DELIVERED, []).append(1.0 if sent_in_window else 0.0)
    if rec.outcome is not Outcome.OK:
        for name in SAMPLED:
            samples.setdefault(name, []).append(float("inf"))
        samples.setdefault(ITL_COUNTS, []).append(1.0)
        return
    offsets = np.asarray(rec.chunk_offsets_us, dtype=np.int64)
    tokens = np.asarray(rec.chunk_tokens, dtype=np.int64)
    choices = np.asarray(rec.chunk_choices, dtype=np.int64) if rec.chunk_choices else None
    for metric in SAMPLED_FORMULAS:
        if metric is formulas.TPOT and choices is not None:  # n > 1: per choice
            value = request_tpot_ms(offsets, tokens, choices)
        else:
            value = metric.of_record(rec)
        if math.isfinite(value):
            samples[metric.name].append(value)
    itl = formulas.itl_per_token_ms(offsets, tokens, choices)
    samples["itl_ms"].extend(itl.tolist())
    samples.setdefault(ITL_COUNTS, []).append(float(itl.size))
