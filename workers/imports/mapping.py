"""What every importer hands over (`ToolRun`: the tool's levels of `ToolRequest`s, its version,
configuration and what it did not record) and the one mapping from it to peakload's own shapes: a
`RunSpec`, `run_levels` rows and `RequestRecord`s, as `peakload run` would have stored them.

Clocks: a `ToolRequest`'s times are seconds on the tool's own clock (any origin: each importer
says which), durations seconds; `ToolRun.wall_origin_ns` places that clock's zero on the wall
(ns since the Unix epoch). Nothing a tool did not record is made up: no scheduled time means the
request was due when it was sent (`latency_from` "send"), no per-token gaps means no chunks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from loadgen.errors import SpecError
from loadgen.results.records import Outcome, Phase, RequestRecord, TokenSource, make_request_id
from loadgen.runspec.spec import RunSpec

IMPORT_SHARD = "import-0"
IMPORT_REGION = "local"
STATUS_IN_ERROR = re.compile(r"\b([45]\d\d)\b")
ERROR_DETAIL_MAX = 500
REASON_PHRASES = {s.phrase.lower(): s.value for s in HTTPStatus if s.value >= 400}
UNRECORDED_URL = "http://unrecorded.invalid"  # a reserved name (RFC 2606): never a real target
URL_NOTE = "target URL: not in the file (give --base-url)"


class ImportFileError(SpecError):
    """A tool's result file that cannot be read as that tool's output: names the file and the
    field (a SpecError, so every command exits 2 for it)."""

    def __init__(self, path: str, field_name: str, problem: str) -> None:
        super().__init__(problem, where=f"{path}: {field_name}" if field_name else path)


@dataclass(slots=True)
class ToolRequest:
    """One request as the tool recorded it. `start_s`: the send, on the tool's clock;
    `scheduled_s`: when it was due (None: not recorded); `ttft_s`, `e2e_s`: from the send;
    `itls_s`: the gaps between successive token-carrying chunks after the first (None: not
    kept); `error`: the tool's error text (None or "" for a success)."""

    start_s: float
    ttft_s: float | None
    e2e_s: float | None
    itls_s: list[float] | None = None
    scheduled_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    http_status: int | None = None
    from_usage: bool = False  # output_tokens is the server's usage count
    cancelled: bool = False  # the tool stopped it (its run's end), not the server


@dataclass(slots=True)
class ToolLevel:
    """One load level the tool ran: `kind` concurrency or rate (requests/s), its value, and its
    requests."""

    kind: str
    value: float
    requests: list[ToolRequest] = field(default_factory=list)
    span_s: float | None = None  # the level's length as the tool recorded it (else its requests')


@dataclass(slots=True)
class ToolRun:
    """A tool's results, ready to map. `config` is the tool's own configuration as it recorded
    it (kept with the import); `imported` and `missing` are sentences the report prints."""

    tool: str
    tool_version: str | None
    source: str
    model: str
    base_url: str
    api: str
    levels: list[ToolLevel]
    wall_origin_ns: int
    config: dict[str, Any] = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None  # the configured lengths, where the tool recorded them
    output_tokens: int | None = None
    arrival: str | None = None  # constant | poisson | gamma, for rate levels

    def scheduled(self) -> bool:
        return any(r.scheduled_s is not None for lv in self.levels for r in lv.requests)


@dataclass(slots=True)
class Mapped:
    """A `ToolRun` in peakload's shapes, ready for workers.imports.store."""

    spec: RunSpec
    levels: list[dict[str, Any]]
    records: list[RequestRecord]
    notes: dict[str, Any]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _outcome(req: ToolRequest) -> tuple[Outcome, int | None, str | None]:
    if req.cancelled:
        return Outcome.CANCELLED, None, (req.error or "stopped by the tool")[:ERROR_DETAIL_MAX]
    if not req.error:
        return Outcome.OK, None, None
    detail = req.error.strip()[:ERROR_DETAIL_MAX]
    status = req.http_status
    if status is None and (m := STATUS_IN_ERROR.search(detail)):
        status = int(m.group(1))
    if status is None:  # a bare reason phrase ("Service Unavailable"), as aiohttp reports it
        status = REASON_PHRASES.get(detail.lower())
    return (Outcome.HTTP_ERROR if status else Outcome.STREAM_ERROR), status, detail


def _chunks(req: ToolRequest) -> tuple[list[int], list[int]]:
    """Chunk arrivals (µs from send) and tokens per chunk from TTFT and the gaps after it: one
    chunk per gap, one token each; a count the tool reports beyond the chunks goes to the
    first chunk (which ITL does not measure)."""
    if req.ttft_s is None or req.itls_s is None:
        return [], []
    t = req.ttft_s
    offsets = [round(t * 1e6)]
    for gap in req.itls_s:
        t += gap
        offsets.append(round(t * 1e6))
    tokens = [1] * len(offsets)
    if req.output_tokens is not None and req.output_tokens > len(offsets):
        tokens[0] += req.output_tokens - len(offsets)
    return offsets, tokens


def record(
    run_id: str, level: int, index: int, req: ToolRequest, wall_origin_ns: int
) -> RequestRecord:
    """One tool request as a stored record: scheduled at its due time (else its send), every
    offset from there; what the tool did not record stays None."""
    due = req.scheduled_s if req.scheduled_s is not None else req.start_s
    sent_ns = max(0, _ns(req.start_s - due))
    outcome, status, detail = _outcome(req)
    offsets, tokens = _chunks(req)
    ok = outcome is Outcome.OK
    first = sent_ns + _ns(req.ttft_s) if req.ttft_s is not None and ok else None
    end = sent_ns + _ns(req.e2e_s) if req.e2e_s is not None else None
    if end is None and offsets:
        end = sent_ns + offsets[-1] * 1000
    out = req.output_tokens if req.output_tokens is not None else sum(tokens)
    return RequestRecord(
        request_id=make_request_id(run_id, IMPORT_SHARD, index),
        run_id=run_id,
        shard_id=IMPORT_SHARD,
        region=IMPORT_REGION,
        level=level,
        index=index,
        scheduled_at_ns=wall_origin_ns + _ns(due),
        phase=Phase.STEADY,
        outcome=outcome,
        http_status=status,
        error_detail=detail,
        sent_ns=sent_ns,
        first_token_ns=first,
        end_ns=end,
        prompt_tokens=req.prompt_tokens,
        output_tokens=max(0, out) if ok else 0,
        usage_prompt_tokens=req.prompt_tokens if req.from_usage else None,
        usage_completion_tokens=out if req.from_usage and ok else None,
        client_tokens=sum(tokens),
        token_source=TokenSource.USAGE if req.from_usage else TokenSource.CLIENT,
        chunk_offsets_us=offsets if ok else [],
        chunk_tokens=tokens if ok else [],
    )


def _level_row(index: int, lv: ToolLevel, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The level's span as the tool ran it: first due time to the last end (its steady window:
    a tool's warm-up, where it had one, is not among the imported requests)."""
    starts = [r.scheduled_at_ns for r in records]
    ends = [
        r.scheduled_at_ns + (r.end_ns if r.end_ns is not None else r.sent_ns or 0) for r in records
    ]
    start, end = (min(starts), max(ends)) if records else (0, 0)
    if lv.span_s is not None and records:
        end = max(end, start + _ns(lv.span_s))
    dur = max((end - start) / 1e9, 1e-3)
    return {
        "level": index,
        "kind": lv.kind,
        "value": lv.value,
        "duration_s": dur,
        "warmup_s": 0.0,
        "cooldown_s": 0.0,
        "started_at_ns": start if records else None,
        "ended_at_ns": end if records else None,
        "steady_start_ns": start if records else None,
        "steady_end_ns": end if records else None,
        "drained_at_ns": end if records else None,
        "between_levels": "drain",
    }


def _mean_len(values: Sequence[int | None]) -> int | None:
    vals = [v for v in values if v is not None and v > 0]
    return max(1, round(sum(vals) / len(vals))) if vals else None


def build_spec(
    run: ToolRun, name: str, labels: Mapping[str, str], levels: list[dict[str, Any]]
) -> RunSpec:
    """The run's spec: the tool's target, model, lengths and load, where they map."""
    reqs = [r for lv in run.levels for r in lv.requests]
    prompt = run.prompt_tokens or _mean_len([r.prompt_tokens for r in reqs]) or 1
    output = run.output_tokens or _mean_len([r.output_tokens for r in reqs]) or 1
    kinds = {lv.kind for lv in run.levels}
    load: dict[str, Any] = {"duration_s": max((lv["duration_s"] for lv in levels), default=1.0)}
    rates = [lv.value for lv in run.levels if lv.kind == "rate"]
    if kinds == {"rate"} or (rates and "concurrency" not in kinds):
        load["rate"] = rates
        if run.arrival:
            load["arrival"] = run.arrival
    elif "concurrency" in kinds and not rates:
        load["concurrency"] = [max(1, int(lv.value)) for lv in run.levels]
    else:  # a sweep of both kinds: the spec names the rates, each level row keeps its own kind
        load["rate"] = rates
    all_labels: dict[str, Any] = {
        "load_driver": run.tool,
        "load_driver_version": run.tool_version or "unknown",
        **labels,
    }
    return RunSpec.model_validate(
        {
            "name": name,
            "description": f"imported from {run.tool} output {run.source}",
            "target": {"api": run.api, "base_url": run.base_url, "model": run.model},
            "workload": {"prompt_tokens": prompt, "output_tokens": output},
            "load": load,
            "labels": all_labels,
        }
    )


def notes(run: ToolRun, n_records: int) -> dict[str, Any]:
    """What the run says about its import: the tool, its version and configuration, what was
    imported and what the tool did not record."""
    missing = list(run.missing)
    if not run.scheduled():
        missing.append(
            "scheduled times: latency from the send only (ttft_sched_ms and e2e_sched_ms equal "
            "the send-based figures; coordinated omission cannot be seen)"
        )
    missing.append("generator health (loop lag, dispatch delay, CPU): the run is not self-checked")
    return {
        "tool": run.tool,
        "tool_version": run.tool_version,
        "source": run.source,
        "requests": n_records,
        "latency_from": "scheduled" if run.scheduled() else "send",
        "imported": list(run.imported),
        "missing": missing,
        "config": run.config,
    }


def map_run(run: ToolRun, run_id: str, name: str, labels: Mapping[str, str]) -> Mapped:
    """`run` as peakload's spec, level rows and records (indexes numbered across levels)."""
    records: list[RequestRecord] = []
    rows: list[dict[str, Any]] = []
    for li, lv in enumerate(run.levels):
        recs = [
            record(run_id, li, len(records) + i, r, run.wall_origin_ns)
            for i, r in enumerate(lv.requests)
        ]
        records.extend(recs)
        rows.append(_level_row(li, lv, recs))
    spec = build_spec(run, name, labels, rows)
    return Mapped(spec, rows, records, notes(run, len(records)))


# ---------------------------------------------------------------- helpers the importers share


def need(obj: Mapping[str, Any], key: str, path: str, where: str = "") -> Any:
    """`obj[key]`, or ImportFileError naming the file and the field."""
    if not isinstance(obj, Mapping) or key not in obj:
        raise ImportFileError(path, f"{where}{key}", "missing")
    return obj[key]


def number(value: Any, path: str, field_name: str, *, allow_none: bool = False) -> float | None:
    """A finite number (seconds, counts), or ImportFileError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ImportFileError(path, field_name, f"not a finite number: {value!r}")
    return float(value)


def count(value: Any, path: str, field_name: str) -> int | None:
    """A non-negative integer count, None when absent."""
    if value is None:
        return None
    v = number(value, path, field_name)
    assert v is not None
    if v < 0 or v != int(v):
        raise ImportFileError(path, field_name, f"not a count: {value!r}")
    return int(v)


SECRET_OPTION = re.compile(
    r"(--?(?:api[-_]?key|header|H|token|password)[ =])('[^']*'|\"[^\"]*\"|\S+)", re.IGNORECASE
)


def redact_command(command: Any) -> Any:
    """A tool's recorded command line with the values of key, header and token options
    replaced (a key may sit there in the clear)."""
    if not isinstance(command, str):
        return command
    return SECRET_OPTION.sub(lambda m: m.group(1) + "REDACTED", command)
