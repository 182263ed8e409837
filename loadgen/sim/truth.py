"""The simulated engine's ground truth: one JSONL line per finished completion request with the
monotonic ns (time.perf_counter_ns, CLOCK_MONOTONIC on Linux, comparable across processes on one
host) of every write, and counts per status, outcome and fault. Serialised off the hot path.

Line layout (`"type": "request"`):
  request_id, path, stream, status, outcome (ok | http_error | error_event | reset | no_done |
  html_error | client_closed | shutdown | bad_request), faults (["kind:arg", ...]),
  prompt_tokens, max_tokens, completion_tokens (tokens written), reasoning_tokens,
  headers_ns (request head fully received), request_ns (body fully received; the schedule's
  anchor), response_headers_ns (status line and headers written; None if never),
  chunk_ns[i] (write i of the body after the head; the role-only chunk goes with the head),
  chunk_tokens[i] (tokens whose event completed in write i), chunk_due_ns[i], chunk_late_us[i]
  (write time minus due time, µs), chunk_write_us[i] (how long the write call took, µs: the
  bytes left somewhere in that interval, so a long one, e.g. the process preempted, makes
  chunk_ns[i] uncertain by as much), end_ns (request finished).
The last line (`"type": "summary"`, on shutdown) holds totals: by_status, by_outcome, by_fault.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import IO, Any

FLUSH_SLICE = 4  # records serialised per loop callback (~0.1-0.2 ms each)
FLUSH_SLICE_GAP_S = 0.002  # between slices, so due writes catch up


class TruthLog:
    """Collects finished requests; counts them always, writes them if a path was given."""

    def __init__(self, path: Path | None, flush_interval_s: float) -> None:
        self.path = path
        self.by_status: Counter[int] = Counter()
        self.by_outcome: Counter[str] = Counter()
        self.by_fault: Counter[str] = Counter()
        self.requests = 0
        self.late_max_ns = 0
        self._pending: list[dict[str, Any]] = []
        self._file: IO[str] | None = None
        self._interval = flush_interval_s
        self._timer: asyncio.TimerHandle | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Flush every `flush_interval_s` on `loop` until `close()`."""
        self._loop = loop
        self._timer = loop.call_later(self._interval, self._tick)

    def add(self, rec: dict[str, Any]) -> None:
        """Record one finished request (hot path: counters and a list append only)."""
        self.requests += 1
        self.by_status[rec["status"]] += 1
        self.by_outcome[rec["outcome"]] += 1
        for f in rec["faults"]:
            self.by_fault[f.split(":", 1)[0]] += 1
        if self._file is not None:
            self._pending.append(rec)

    def _tick(self) -> None:
        """Serialise at most FLUSH_SLICE records per loop callback, so a burst of finished
        requests never blocks the token schedule for more than about a millisecond."""
        more = self.flush(FLUSH_SLICE)
        delay = FLUSH_SLICE_GAP_S if more else self._interval
        self._timer = self._loop.call_later(delay, self._tick)

    def flush(self, limit: int | None = None) -> bool:
        """Write pending records (at most `limit`); True if some are still pending."""
        if self._file is None or not self._pending:
            return False
        if limit is None or len(self._pending) <= limit:
            pending, self._pending = self._pending, []
        else:
            pending, self._pending = self._pending[:limit], self._pending[limit:]
        lines = []
        for rec in pending:
            due = rec["chunk_due_ns"]
            late = [(w - d) // 1000 for w, d in zip(rec["chunk_ns"], due, strict=True)]
            rec["chunk_late_us"] = late
            if late:
                self.late_max_ns = max(self.late_max_ns, max(late) * 1000)
            lines.append(json.dumps(rec, separators=(",", ":")))
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()
        return bool(self._pending)

    def summary(self) -> dict[str, Any]:
        return {
            "type": "summary",
            "requests": self.requests,
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "by_outcome": dict(sorted(self.by_outcome.items())),
            "by_fault": dict(sorted(self.by_fault.items())),
        }

    def close(self) -> None:
        """Flush what is pending, append the summary line, close the file."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._file is None:
            return
        self.flush()
        self._file.write(json.dumps(self.summary()) + "\n")
        self._file.close()
        self._file = None


def read_truth(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(request lines, summary line or None) of a truth log; safe while the sim is writing."""
    requests: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line still being written by a running sim
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("type") == "summary":
                summary = rec
            else:
                requests.append(rec)
    return requests, summary
