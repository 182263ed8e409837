"""Trace files: recorded traffic replayed as send times and lengths, read from peakload's own
JSONL or from the public traces the peers replay (vLLM's benchmarks, inference-perf, GuideLLM,
AIPerf), as they are published:

  peakload  JSONL  {"t": s, "prompt_tokens"?: n, "output_tokens"?: m}
  mooncake  JSONL  {"timestamp": ms from the first request, "input_length": n,
                    "output_length": m, "hash_ids": [ids of 512-token prompt blocks]}
                   (kvcache-ai/Mooncake, FAST'25 traces; AIPerf's `mooncake_trace`)
  burstgpt  CSV    Timestamp (s from the collection's start), Model, Request tokens,
                   Response tokens, Total tokens, Log Type (HPMLL/BurstGPT; newer files add
                   Session ID and Elapsed time, ignored like Model, Total tokens and Log Type)
  azure     CSV    TIMESTAMP (wall clock, "2023-11-16 18:15:46.6805900"), ContextTokens,
                   GeneratedTokens (Azure/AzurePublicDataset, the 2023 and 2024 LLM traces)

Times are seconds in the trace's own clock: as written for the relative formats, from the
earliest row for Azure's wall clock. `trace_entries` cuts the spec's window from them and
divides by its speed-up. A bad file raises one SpecError naming the file, the line and the
column (or key), before any request: loadgen.checks.specfile reads every trace through.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from loadgen.engine.schedule import TraceEntry, load_trace
from loadgen.errors import SpecError
from loadgen.runspec.jsonl import jsonl_rows
from loadgen.runspec.load_spec import LoadSpec

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def trace_entries(load: LoadSpec) -> list[TraceEntry]:
    """The trace `load` names, in its format, cut to its window and scaled: each entry's time
    is (t - trace_start_s) / trace_speedup for t in [trace_start_s, trace_start_s +
    trace_duration_s), in send order. Raises SpecError when the window holds no line."""
    assert load.trace is not None
    rows = read_trace(load.trace, load.trace_format)
    lo = load.trace_start_s
    hi = lo + load.trace_duration_s if load.trace_duration_s is not None else math.inf
    speed = load.trace_speedup
    out = [
        TraceEntry((e.t_s - lo) / speed, e.prompt_tokens, e.output_tokens, e.prefix_blocks)
        for e in rows
        if lo <= e.t_s < hi
    ]
    if not out:
        raise SpecError(
            f"none of its {len(rows):,} lines falls in the window [{lo:g} s, {hi:g} s) of "
            f"trace_start_s / trace_duration_s (its times run from {rows[0].t_s:g} s to "
            f"{rows[-1].t_s:g} s)",
            where=load.trace,
        )
    return out


def read_trace(path: str, fmt: str = "auto") -> list[TraceEntry]:
    """Every line of the trace at `path` in format `fmt` ("auto": `detect_format`), sorted by
    time (stable: lines at one instant keep the file's order)."""
    kind = detect_format(path) if fmt == "auto" else fmt
    readers: dict[str, Callable[[Path], list[TraceEntry]]] = {
        "peakload": lambda p: load_trace(str(p)),
        "mooncake": _read_mooncake,
        "burstgpt": _read_burstgpt,
        "azure": _read_azure,
    }
    rows = readers[kind](Path(path))
    if not rows:
        raise SpecError("trace is empty", where=path)
    rows.sort(key=lambda e: e.t_s)
    return rows


def detect_format(path: str) -> str:
    """The format told from the first non-blank line: a JSON object with "t" (peakload) or
    "timestamp" (mooncake), or a CSV header naming BurstGPT's or Azure's columns."""
    first = next(_lines(Path(path)), None)
    if first is None:
        raise SpecError("trace is empty", where=path)
    lineno, line = first
    if line.lstrip().startswith("{"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"line {lineno}: not JSON ({exc.msg})", where=path) from None
        if isinstance(row, dict) and "t" in row:
            return "peakload"
        if isinstance(row, dict) and "timestamp" in row:
            return "mooncake"
    else:
        header = {c.strip() for c in next(csv.reader([line]))}
        if set(AZURE_COLUMNS) <= header:
            return "azure"
        if set(BURSTGPT_COLUMNS) <= header:
            return "burstgpt"
    raise SpecError(
        f'line {lineno}: not a trace layout peakload knows (a JSON line with "t" or '
        "\"timestamp\", or a CSV header with BurstGPT's or Azure's columns); name it with "
        "load.trace_format",
        where=path,
    )


def _lines(p: Path) -> Iterator[tuple[int, str]]:
    """`(line number, text)` of each non-blank line, from 1; SpecError for a folder, a missing
    or unreadable file, or bytes that are not UTF-8 (a leading byte-order mark is dropped)."""
    if p.is_dir():
        raise SpecError("is a folder, not a trace file", where=str(p))
    try:
        with p.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    msg = (
                        f"line {lineno}: not UTF-8 text (byte {raw[exc.start]:#04x} at {exc.start})"
                    )
                    raise SpecError(msg, where=str(p)) from None
                if line.strip():
                    yield lineno, line
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", where=str(p)) from None


def _csv_rows(p: Path, needed: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """`(line number, [the `needed` columns' text, in that order])` of each data row of a CSV
    file whose header names at least `needed`; SpecError for a missing column or a row whose
    field count differs from the header's. One csv reader for the file (fast: a published
    trace has millions of rows), fed line by line so each row keeps its line number."""
    at = [0]

    def numbered() -> Iterator[str]:
        for lineno, line in _lines(p):
            at[0] = lineno
            yield line

    reader = csv.reader(numbered())
    head = next(reader, None)
    if head is None:
        return
    header = [c.strip() for c in head]
    missing = [c for c in needed if c not in header]
    if missing:
        raise SpecError(
            f"line {at[0]}: no column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(c) for c in missing)} (the header has "
            f"{', '.join(repr(c) for c in header)})",
            where=str(p),
        )
    cols = [header.index(c) for c in needed]
    width = len(header)
    for fields in reader:
        if len(fields) != width:
            raise SpecError(
                f"line {at[0]}: {len(fields)} fields, the header has {width}", where=str(p)
            )
        yield at[0], [fields[i].strip() for i in cols]


def _bad(p: Path, lineno: int, column: str, value: object, want: str) -> SpecError:
    shown = repr(value) if isinstance(value, str) else json.dumps(value)
    return SpecError(f'line {lineno}, column "{column}": {shown} is not {want}', where=str(p))


def _count(p: Path, lineno: int, column: str, value: object) -> int:
    """A token count: a whole number >= 0 (text or JSON)."""
    try:
        n = int(value) if isinstance(value, str) else value
    except ValueError:
        n = None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise _bad(p, lineno, column, value, "a whole number of tokens >= 0")
    return n


def _seconds(p: Path, lineno: int, column: str, value: object) -> float:
    """A relative time: a finite number >= 0 (text or JSON)."""
    try:
        t = float(value) if isinstance(value, (str, int, float)) else math.nan
    except ValueError:
        t = math.nan
    if isinstance(value, bool) or not (t >= 0 and math.isfinite(t)):
        raise _bad(p, lineno, column, value, "a time >= 0")
    return t


def _read_mooncake(p: Path) -> list[TraceEntry]:
    out: list[TraceEntry] = []
    for lineno, row in jsonl_rows(p):
        if not isinstance(row, dict):
            raise SpecError(f"line {lineno}: not a JSON object", where=str(p))
        for key in ("timestamp", "input_length"):
            if key not in row:
                raise SpecError(f'line {lineno}: no "{key}"', where=str(p))
        t_ms = _seconds(p, lineno, "timestamp", row["timestamp"])
        prompt = _count(p, lineno, "input_length", row["input_length"])
        out_len = row.get("output_length")
        output = None if out_len is None else _count(p, lineno, "output_length", out_len)
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
        ):
            raise _bad(p, lineno, "hash_ids", ids, "a list of whole numbers >= 0")
        out.append(TraceEntry(t_ms / 1000.0, max(prompt, 1), _asked(output), tuple(ids)))
    return out


def _read_burstgpt(p: Path) -> list[TraceEntry]:
    out: list[TraceEntry] = []
    for lineno, (when, asked, answered) in _csv_rows(p, BURSTGPT_COLUMNS):
        t = _seconds(p, lineno, "Timestamp", when)
        prompt = _count(p, lineno, "Request tokens", asked)
        output = _count(p, lineno, "Response tokens", answered)
        out.append(TraceEntry(t, max(prompt, 1), _asked(output)))
    return out


def _read_azure(p: Path) -> list[TraceEntry]:
    stamped: list[tuple[datetime, int, int]] = []
    for lineno, (text, context, generated) in _csv_rows(p, AZURE_COLUMNS):
        try:  # 100 ns ticks: the seventh decimal is dropped (a microsecond is far below a send)
            when = datetime.fromisoformat(text)
        except ValueError:
            raise _bad(p, lineno, "TIMESTAMP", text, "a date and time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        prompt = _count(p, lineno, "ContextTokens", context)
        output = _count(p, lineno, "GeneratedTokens", generated)
        stamped.append((when, prompt, output))
    if not stamped:
        return []
    origin = min(w for w, _, _ in stamped)
    return [
        TraceEntry((w - origin).total_seconds(), max(pt, 1), _asked(ot)) for w, pt, ot in stamped
    ]


def _asked(output: int | None) -> int | None:
    """The output length to ask for: a row that logged 0 tokens out (BurstGPT's failed
    requests) still arrived and was read, so it is replayed asking for one token."""
    return None if output is None else max(output, 1)
