"""The records a run produces: one terminal `RequestRecord` per scheduled request, one `Tick`
per shard per second. These are what the store takes (deploy/sql/ is their table layout).

Clock conventions: every `*_ns` offset is a duration on one host's monotonic clock
(`time.perf_counter_ns`), measured from the request's *scheduled* time; `scheduled_at_ns` is the
only wall-clock value (ns since the Unix epoch = the run's wall anchor plus a monotonic offset).
Chunk arrival offsets are µs from the moment the request was sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    """How a request ended. Exactly one per scheduled request."""

    OK = "ok"
    HTTP_ERROR = "http_error"  # non-2xx status; `http_status` holds it
    STREAM_ERROR = "stream_error"  # in-band error event, reset, malformed or truncated stream
    TIMEOUT = "timeout"  # `error_phase` says which: connect, headers, first_token, idle, deadline
    CANCELLED = "cancelled"  # the run was aborted or ended while the request was in flight
    NOT_SENT = "not_sent"  # `error_phase` holds the reason: run_ended, concurrency_cap, policy


class Phase(StrEnum):
    """Where in its load level a request was scheduled: only `steady` counts for throughput."""

    WARMUP = "warmup"
    STEADY = "steady"
    COOLDOWN = "cooldown"


class TokenSource(StrEnum):
    """Where `output_tokens` came from: the server's usage block or the client's own count."""

    USAGE = "usage"
    CLIENT = "client"


REQUEST_ID_NAMESPACE = uuid.UUID("6a0d2c1e-3f4b-5d6e-8f70-9a1b2c3d4e5f")


def make_request_id(run_id: str, shard_id: str, index: int, attempt: int = 0) -> str:
    """A request id made at schedule time, stable across replays so writes are idempotent."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, f"{run_id}/{shard_id}/{index}/{attempt}"))


@dataclass(slots=True)
class RequestRecord:
    """One scheduled request and how it ended, with every chunk's arrival.

    Offsets (`sent_ns`, `headers_ns`, `first_token_ns`, `first_answer_ns`, `end_ns`) are ns on the
    monotonic clock from `scheduled_at`; None means the event never happened. `first_token_ns` is
    the first non-empty content *or* reasoning delta; `first_answer_ns` the first content delta.
    `chunk_offsets_us[i]` is µs from send to the arrival of the read that carried chunk i;
    `chunk_tokens[i]` the tokens attributed to it (see `token_source`); `chunk_choices[i]` the
    choice (of `n > 1`) chunk i belongs to, empty when every chunk is choice 0
    (loadgen/results/choices).
    """

    request_id: str
    run_id: str
    shard_id: str
    region: str
    level: int
    index: int
    scheduled_at_ns: int
    phase: Phase = Phase.STEADY
    attempt: int = 0
    session_id: int | None = None
    turn: int | None = None
    outcome: Outcome = Outcome.OK
    http_status: int | None = None
    error_phase: str | None = None
    error_detail: str | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_token_ns: int | None = None
    first_answer_ns: int | None = None
    end_ns: int | None = None
    prompt_tokens: int | None = None  # planned prompt length (synthetic) or server usage
    max_tokens: int | None = None  # requested output length
    output_tokens: int = 0
    reasoning_tokens: int = 0
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    client_tokens: int = 0  # content + reasoning deltas counted by the client
    token_source: TokenSource = TokenSource.CLIENT
    chunk_offsets_us: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_choices: list[int] = field(default_factory=list)  # empty: all choice 0
    retry_after_s: float | None = None
    connect_ns: int | None = None  # new connection's set-up inside the request; None: reused
    resent: int = 0  # re-sends after a reused connection died before any response byte
    server_prompt_tokens: int | None = None  # loadgen.target.ServerTimings, as the server said
    server_prefill_ms: float | None = None
    server_decode_tokens: int | None = None
    server_decode_ms: float | None = None
    server_cached_tokens: int | None = None
    server_queue_ms: float | None = None
    # speech and transcription (deploy/sql/0210): the audio's decoded length (speech: the
    # response's, transcription: the upload's), its bytes, and the transcript's words
    audio_ms: float | None = None
    audio_bytes: int | None = None
    transcript_words: int | None = None
    adapter: str | None = None  # the LoRA adapter asked for ([[workload.adapters]]); None: none
    shared_prefix_tokens: int | None = None  # planned shared-prefix tokens; None: no prefix set
    prompt_text: str | None = None  # only when the run opts in to storing content
    response_text: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass(slots=True)
class Tick:
    """One second of one shard: progress and the generator's own health.

    `t_ns` is wall-clock ns since the epoch (anchor + monotonic offset) at the end of the second.
    `output_tokens` counts the tokens that arrived in the second (plus, at a request's end, the
    difference its server-reported usage made), so a per-second throughput is from arrivals.
    Lags are ms; `cpu_percent` is this process's CPU over the second (100 = one core).
    """

    run_id: str
    shard_id: str
    region: str
    level: int
    t_ns: int
    in_flight: int
    started: int
    completed: int
    errors: int
    output_tokens: int
    loop_lag_ms_max: float
    loop_lag_ms_p99: float
    dispatch_delay_ms_max: float
    cpu_percent: float
    rss_bytes: int


@dataclass(slots=True)
class Batch:
    """What a runner hands its sink in one call."""

    records: list[RequestRecord] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records) + len(self.ticks)
