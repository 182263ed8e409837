"""The metrics a run gives out to a monitoring stack, live (loadgen.engine.livemetrics, Prometheus)
and after the end (analysis.reports.otlp, OTLP JSON): each instrument's OpenTelemetry name, unit,
bucket boundaries and labels, and what one request record adds to them. One module, so a live
scrape and an export of the same run count the same things into the same buckets.

Names follow the OpenTelemetry GenAI semantic conventions' *client* metrics (semantic-conventions
v1.41, docs/gen-ai/gen-ai-metrics.md; status Development): peakload is the client, so its TTFT is
`gen_ai.client.operation.time_to_first_chunk` and its chunk gaps
`gen_ai.client.operation.time_per_output_chunk` (the `gen_ai.server.*` instruments are what an
engine reports of itself). Progress counts have no convention and are named `peakload.*`.
Prometheus names are the OTel names converted as the OTel Prometheus exporter does: dots to
underscores, unit `s` as the suffix `_seconds`, a `{...}` annotation unit dropped, `_total` on a
counter.

Values (loadgen.results.formulas, the one definition of each): TTFT from send, s; chunk gaps
between consecutive token-carrying chunks (formulas.token_gaps, per choice for n > 1), s, one
observation per chunk as the convention counts them (the per-token ITL the reports print weights
a chunk of k tokens k times); duration = E2E from send, s, for every request that was sent and
ended, `error.type` = its outcome unless ok; token usage for ok requests, input = the server's
prompt usage (else the planned prompt length), output = output_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from loadgen.results import formulas
from loadgen.results.choices import has_choices, per_choice_gaps

Kind = Literal["counter", "gauge", "histogram"]

# bucket boundaries: the conventions' ExplicitBucketBoundaries (ITL: theirs for time per output
# token, with four below 10 ms, where a fast engine's gaps lie)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0)  # fmt: skip
ITL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                 0.4, 0.5, 0.75, 1.0, 2.5)  # fmt: skip
DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                      40.96, 81.92)  # fmt: skip
TOKEN_BUCKETS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
                 1048576.0, 4194304.0, 16777216.0, 67108864.0)  # fmt: skip

RUN_LABELS = ("run_id", "region")  # on every instrument: which run, which region's workers


@dataclass(frozen=True, slots=True)
class Instrument:
    """One metric: its OTel name, UCUM unit, kind, the labels beyond RUN_LABELS (OTel
    attribute names) and, for a histogram, its bucket upper bounds (inclusive, as both
    Prometheus's `le` and OTel's explicit bounds are)."""

    name: str
    unit: str
    kind: Kind
    description: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """The name Prometheus shows (without `_total`, `_bucket`..., which the client adds)."""
        base = self.name.replace(".", "_")
        return f"{base}_seconds" if self.unit == "s" else base

    @property
    def label_names(self) -> tuple[str, ...]:
        """Every label as Prometheus spells it."""
        return tuple(x.replace(".", "_") for x in (*RUN_LABELS, *self.labels))


REQUESTS = Instrument(
    "peakload.requests", "{request}", "counter", "Requests ended, by outcome", ("outcome",)
)
IN_FLIGHT = Instrument(
    "peakload.requests.in_flight", "{request}", "gauge", "Requests in flight (last tick)"
)
TTFT = Instrument(
    "gen_ai.client.operation.time_to_first_chunk",
    "s",
    "histogram",
    "Time from send to the first content or reasoning token, ok requests",
    buckets=TTFT_BUCKETS_S,
)
ITL = Instrument(
    "gen_ai.client.operation.time_per_output_chunk",
    "s",
    "histogram",
    "Gap before each token-carrying chunk after the first, ok requests",
    buckets=ITL_BUCKETS_S,
)
DURATION = Instrument(
    "gen_ai.client.operation.duration",
    "s",
    "histogram",
    "Time from send to the end, every sent request that ended",
    ("error.type",),
    DURATION_BUCKETS_S,
)
TOKENS = Instrument(
    "gen_ai.client.token.usage",
    "{token}",
    "histogram",
    "Input and output tokens per ok request",
    ("gen_ai.token.type",),
    TOKEN_BUCKETS,
)
INSTRUMENTS = (REQUESTS, IN_FLIGHT, TTFT, ITL, DURATION, TOKENS)
HISTOGRAMS = (TTFT, ITL, DURATION, TOKENS)


@dataclass(slots=True)
class Observed:
    """What a batch of terminal records adds: `requests[(run_id, region, outcome)]` ended, and
    per (histogram, label values) the values observed (float64 arrays, unit of the instrument)."""

    requests: dict[tuple[str, str, str], int] = field(default_factory=dict)
    values: dict[tuple[Instrument, tuple[str, ...]], list[npt.NDArray[np.float64]]] = field(
        default_factory=dict
    )

    def add(self, inst: Instrument, labels: tuple[str, ...], values: npt.NDArray[Any]) -> None:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size:
            self.values.setdefault((inst, labels), []).append(v)

    def arrays(self) -> dict[tuple[Instrument, tuple[str, ...]], npt.NDArray[np.float64]]:
        return {k: np.concatenate(vs) for k, vs in self.values.items()}


def _column(records: list[Any], name: str) -> npt.NDArray[np.float64]:
    """A field of every record as float64, NaN where absent (None, or NaN in a frame)."""
    return np.asarray(
        [np.nan if (x := getattr(r, name)) is None else x for r in records], dtype=np.float64
    )


def chunk_gaps_s(records: list[Any]) -> npt.NDArray[np.float64]:
    """The records' gaps (s) before each token-carrying chunk after the first: per record
    formulas.token_gaps (per choice for n > 1, choices.per_choice_gaps), concatenated; the
    records without choices in one pass (a gap is kept only within one record)."""
    many = [r for r in records if len(r.chunk_offsets_us) > 1]
    single = [r for r in many if not has_choices(r.chunk_choices)]
    parts: list[npt.NDArray[Any]] = []
    if single:
        off = np.concatenate([np.asarray(r.chunk_offsets_us, dtype=np.int64) for r in single])
        tok = np.concatenate([np.asarray(r.chunk_tokens, dtype=np.int64) for r in single])
        rid = np.repeat(np.arange(len(single)), [len(r.chunk_offsets_us) for r in single])
        keep = tok > 0
        off, rid = off[keep], rid[keep]
        parts.append((off[1:] - off[:-1])[rid[1:] == rid[:-1]])
    for r in many:
        if has_choices(r.chunk_choices):
            gap, _ = per_choice_gaps(
                np.asarray(r.chunk_offsets_us, dtype=np.int64),
                np.asarray(r.chunk_tokens, dtype=np.int64),
                np.asarray(r.chunk_choices, dtype=np.int64),
            )
            parts.append(gap)
    if not parts:
        return np.empty(0)
    return np.concatenate(parts).astype(np.float64) / 1e6


def observe(records: list[Any]) -> Observed:
    """What terminal records add to every instrument: any objects with the record's field
    names (loadgen.results.records.RequestRecord, or a stored row of load_requests), `outcome`
    as a string. Vectorised over the batch with loadgen.results.formulas' own forms."""
    out = Observed()
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(records):
        key = (str(r.run_id), str(r.region))
        groups.setdefault(key, []).append(i)
        okey = (*key, str(r.outcome))
        out.requests[okey] = out.requests.get(okey, 0) + 1
    if not records:
        return out
    outcome = np.asarray([str(r.outcome) for r in records])
    ok = outcome == "ok"
    sent, first, end = (_column(records, c) for c in ("sent_ns", "first_token_ns", "end_ns"))
    ttft_s = formulas.ttft_ms(first, sent) / 1e3
    e2e_s = formulas.e2e_ms(end, sent) / 1e3
    usage, planned = _column(records, "usage_prompt_tokens"), _column(records, "prompt_tokens")
    prompt = np.where(np.isfinite(usage), usage, planned)
    output = _column(records, "output_tokens")
    for labels, rows in groups.items():
        idx = np.asarray(rows)
        oks = idx[ok[idx]]
        out.add(TTFT, labels, ttft_s[oks])
        out.add(ITL, labels, chunk_gaps_s([records[i] for i in oks]))
        out.add(TOKENS, (*labels, "input"), prompt[oks])
        out.add(TOKENS, (*labels, "output"), output[oks])
        for kind in np.unique(outcome[idx]).tolist():
            sel = idx[outcome[idx] == kind]
            out.add(DURATION, (*labels, "" if kind == "ok" else kind), e2e_s[sel])
    return out


def bucket_counts(bounds: tuple[float, ...], values: npt.NDArray[np.float64]) -> list[int]:
    """Per bucket (each bound's, then above the last), how many values fall in it: a value
    lies in the first bucket whose bound is >= it, as Prometheus's `le` and OTel count."""
    idx = np.searchsorted(np.asarray(bounds), values, side="left")
    return np.bincount(idx, minlength=len(bounds) + 1).tolist()  # type: ignore[no-any-return]
