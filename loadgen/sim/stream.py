"""One completion response from arrival to its truth-log line: writes the head, turns the engine's
tokens into SSE events (k tokens per event, n events per write, reasoning and tool-call deltas,
UTF-8 split across writes), applies in-stream faults, and records every write's time.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from loadgen.sim import audio as sim_audio
from loadgen.sim import formats, params, text
from loadgen.sim.config import FaultKind, SimConfig
from loadgen.sim.engine import BatchEngine, FixedEngine, Scheduler
from loadgen.sim.faults import Faults, describe
from loadgen.sim.http import LAST_CHUNK, chunk, response_head
from loadgen.sim.plan import Plan
from loadgen.sim.trickle import TrickleBody
from loadgen.sim.truth import TruthLog

if TYPE_CHECKING:
    import asyncio

SSE_TYPE = text.SSE_TYPE
_LINGER_RST = struct.pack("ii", 1, 0)


class SharedState(Protocol):
    """What a completion uses of the state its server's connections share (server.SimState):
    the config, the timer heap and the engine, the truth log, the open responses, the count."""

    cfg: SimConfig
    sched: Scheduler
    engine: FixedEngine | BatchEngine
    truth: TruthLog
    active: set[Completion]
    tokens_generated: int


class Completion:
    """A `Sequence` for the engine; also finishes its own truth record (see truth.py)."""

    def __init__(
        self,
        state: SharedState,
        transport: asyncio.Transport,
        plan: Plan,
        faults: Faults,
        on_done: Callable[[bool], None],
        *,
        reject: tuple[int, bytes, dict[str, str], str] | None = None,
        labels: list[str] | None = None,
    ) -> None:
        cfg = state.cfg
        self.state = state
        self.t = transport
        self.plan = plan
        self.prompt_tokens = plan.prompt_tokens
        self.max_tokens = plan.max_tokens
        self._on_done = on_done  # callable(keep_alive: bool) of the connection
        self.reject = reject  # (status, body, extra headers, outcome): answered at once
        self.labels = labels or []
        self.streaming = plan.stream and FaultKind.NON_STREAMING not in faults
        if not self.streaming:  # shaping faults mean nothing without a stream
            keep = (FaultKind.RESET, FaultKind.ERROR_EVENT, FaultKind.NON_STREAMING)
            faults = {k: a for k, a in faults.items() if k in keep}
        self.faults = faults
        self.k = max(1, int(_arg(faults, FaultKind.MULTI_TOKEN, cfg.tokens_per_chunk)))
        self.per_write = max(1, int(_arg(faults, FaultKind.COALESCE, cfg.events_per_write)))
        r = _arg(faults, FaultKind.REASONING, cfg.reasoning_tokens) if plan.chat else 0
        self.reasoning = min(int(r), plan.max_tokens)
        self.tool = plan.chat and FaultKind.TOOL_CALLS in faults
        self.utf8_split = FaultKind.UTF8_SPLIT in faults
        self.no_done = FaultKind.NO_DONE in faults
        self.fault_end: FaultKind | None = None
        self.fault_at = 0
        for kind in (FaultKind.RESET, FaultKind.ERROR_EVENT):
            if kind in faults:
                self.fault_end = kind
                self.fault_at = min(int(_arg(faults, kind, 3)), plan.max_tokens)
        seed = plan.effects.get("seed")
        same = f"seed={seed}" if type(seed) is int else plan.request_id  # honoured seed: same text
        self.offset = text.word_offset(cfg.seed, same)
        self.itl_ns = 0  # the engine's own pace, unless the answer has one (audio)
        if plan.api in sim_audio.APIS:
            self.fmt: formats.Format = sim_audio.make_format(
                plan.api, plan.request_id, cfg.model, plan.audio
            )
            self.itl_ns = sim_audio.token_interval_ns(plan.api, plan.audio, cfg)
        else:
            self.fmt = formats.make_format(
                plan.api, plan.request_id, cfg.model, cfg.reasoning_field
            )
        self.generated = 0
        self.finished = False
        self.choices = text.stream_choices(plan.effects.get("n"), plan.api, self.streaming)
        # an honoured schema (json_schema, a forced tool) shapes a streamed chat answer's text
        name, self.shaped = params.shaped_stream(plan, self.streaming, self.offset, self.reasoning)
        self.tool, self.tool_name = (True, name) if name else (self.tool, "get_weather")
        self._plain = (
            self.streaming
            and self.choices == 1
            and self.fmt.plain
            and self.k == 1
            and self.per_write == 1
            and self.reasoning == 0
            and not self.tool
            and not self.shaped
            and not self.utf8_split
            and self.fault_end is None
        )
        self._pre, self._post = self.fmt.content_pre, self.fmt.content_post
        self._words: list[bytes] = []
        self._events: list[tuple[bytes, int]] = []
        self._carry = b""
        self._carry_tokens = 0
        self.status = 200
        self.admitted_ns = -1  # set by the engine when a slot takes this request
        self.response_headers_ns: int | None = None
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.chunk_due_ns: list[int] = []
        self.chunk_write_us: list[int] = []  # how long each write call took (preemption shows)
        self._trickle: TrickleBody | None = None

    # ---- start -------------------------------------------------------------------------------
    def open(self, now_ns: int) -> None:
        """At arrival (or when a stall ends): write the head; then tokens come from the engine."""
        if self.finished:
            return
        if self.reject is not None:
            status, body, extra, outcome = self.reject
            ctype = extra.pop("content-type", "application/json")
            extra["x-peakload-request-id"] = self.plan.request_id
            extra.update(self.plan.extra_headers)
            keep = self.plan.keep_alive
            head = response_head(
                status,
                ctype,
                length=len(body),
                keep_alive=keep,
                extra=extra,
                keepalive_header=self.state.cfg.keepalive_header,
            )
            self.t.write(head + body)
            self.response_headers_ns = time.perf_counter_ns()
            self.status = status
            self._finish(outcome, keep)
            return
        if FaultKind.TRICKLE in self.faults:
            self._open_trickle(now_ns)
            return
        if not self.streaming:
            if self.fault_end is not None and self.fault_at == 0:
                self._end_with_fault(now_ns)
            else:
                self.state.engine.submit(self, self.plan.request_ns)
            return
        head = response_head(
            200,
            self.fmt.stream_type,
            length=None,
            keep_alive=self.plan.keep_alive,
            keepalive_header=self.state.cfg.keepalive_header,
            extra=self.plan.head_headers(),
        )
        role = self.fmt.role_event() if self.plan.chat else b""
        first = chunk(role) if role else b""
        self.t.write(head + first)
        self.response_headers_ns = time.perf_counter_ns()
        if self.fault_end is not None and self.fault_at == 0:
            self._end_with_fault(now_ns)
            return
        self.state.engine.submit(self, self.plan.request_ns)

    # ---- tokens ------------------------------------------------------------------------------
    def on_token(self, due_ns: int) -> bool:
        if self.finished:
            return True
        i = self.generated
        n = i + 1
        self.generated = n
        self.state.tokens_generated += 1
        if self._plain and n < self.max_tokens:  # the hot path: one token, one event, one write
            ev = self._pre + text.token_bytes(self.offset, i, i != 0) + self._post
            before = time.perf_counter_ns()
            self.t.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            after = time.perf_counter_ns()
            self.chunk_ns.append(after)
            self.chunk_write_us.append((after - before) // 1000)
            self.chunk_tokens.append(1)
            self.chunk_due_ns.append(due_ns)
            return False
        if not self.streaming:
            if n == self.fault_at and self.fault_end is not None:
                self._end_with_fault(due_ns)
                return True
            if n == self.max_tokens:
                self._finish_non_stream(due_ns)
                return True
            return False
        r = self.reasoning
        if i < r:
            phase = "reasoning"
        else:
            phase = "tool" if self.tool else "content"
            if i == r and self.tool:
                self._events.append((self.fmt.tool_open_event(self.tool_name), 0))
        words = self._words
        if self.shaped and i >= r:
            words.append(self.shaped[i - r])
        else:
            words.append(text.token_bytes(self.offset, i, i != 0 and i != r))
        last = n == self.max_tokens
        if last or n == r or len(words) >= self.k or n == self.fault_at:
            ev = self.fmt.content_event(b"".join(words), phase)
            self._events.extend((e, len(words)) for e in text.each_choice(ev, self.choices))
            words.clear()
        if n == self.fault_at and self.fault_end is not None:
            self._end_with_fault(due_ns)
            return True
        if last:
            self._finish_stream(due_ns)
            return True
        if len(self._events) >= self.per_write:
            self._write_events(due_ns, b"", final=False)
        return False

    def _write_events(self, due_ns: int, tail: bytes, final: bool) -> None:
        events = self._events
        data = self._carry + b"".join(e for e, _ in events) + tail
        tokens = self._carry_tokens + sum(n for _, n in events)
        self._carry, self._carry_tokens = b"", 0
        if self.utf8_split and not final:
            split = next((p for p in range(len(data)) if data[p] >= 0xC0), -1)
            if split >= 0:
                cut = split + 1  # after the first byte of a multi-byte character
                head_tokens, pos = 0, 0
                for ev, n in events:
                    pos += len(ev)
                    if pos <= cut:
                        head_tokens += n
                self._carry, self._carry_tokens = data[cut:], tokens - head_tokens
                data, tokens = data[:cut], head_tokens
        events.clear()
        payload = chunk(data) if data else b""
        if final:
            payload += LAST_CHUNK
        self._send(payload, tokens, due_ns)

    def _send(self, payload: bytes, tokens: int, due_ns: int) -> None:
        if not payload:
            return
        before = time.perf_counter_ns()
        self.t.write(payload)
        after = time.perf_counter_ns()
        self.chunk_ns.append(after)
        self.chunk_write_us.append((after - before) // 1000)
        self.chunk_tokens.append(tokens)
        self.chunk_due_ns.append(due_ns)

    # ---- endings -----------------------------------------------------------------------------
    def _finish_stream(self, due_ns: int) -> None:
        timings = None
        if self.state.cfg.report_timings or self.fmt.reports_timings:
            now = time.perf_counter_ns()
            first = self.chunk_ns[0] if self.chunk_ns else now
            report = text.llamacpp_timings
            if self.state.cfg.timings_as == "groq" and self.plan.api.startswith("openai-"):
                report = text.provider_times
            timings = report(
                self.prompt_tokens,
                self.plan.request_ns,
                self.admitted_ns,
                first,
                now,
                self.generated,
            )
        tail = self.fmt.tail(
            "tool_calls" if self.tool else "length",
            self.prompt_tokens,
            self.generated * self.choices,
            self.reasoning if self.reasoning else None,
            self.plan.include_usage,
            timings,
            not self.no_done,
            text.output_text(self.offset, self.reasoning, self.generated),
        )
        self._write_events(due_ns, tail, final=True)
        self._finish("no_done" if self.no_done else "ok", self.plan.keep_alive)

    def _finish_non_stream(self, due_ns: int) -> None:
        r = self.reasoning if self.plan.chat else 0
        now = time.perf_counter_ns()
        timings = None
        if self.state.cfg.report_timings or self.fmt.reports_timings:
            timings = text.llamacpp_timings(
                self.prompt_tokens,
                self.plan.request_ns,
                self.admitted_ns,
                now,
                now,
                self.max_tokens,
            )
        body = self.fmt.body(
            text.output_text(self.offset, r, self.max_tokens),
            text.output_text(self.offset, 0, r) if r else None,
            self.state.cfg.reasoning_field,
            self.prompt_tokens,
            self.max_tokens,
            timings,
        )
        if self.plan.effects and self.plan.api in ("openai-chat", "openai-completions"):
            body = params.apply(self.plan.effects, body)
        extra = self.plan.head_headers()
        elapsed_ms = max(now - self.plan.request_ns, 0) / 1e6
        extra.update(self.fmt.body_headers(self.prompt_tokens, self.max_tokens, elapsed_ms))
        head = response_head(
            200,
            "application/json",
            length=len(body),
            keep_alive=self.plan.keep_alive,
            keepalive_header=self.state.cfg.keepalive_header,
            extra=extra,
        )
        self._send(head + body, self.max_tokens, due_ns)
        self.response_headers_ns = self.chunk_ns[-1]
        self._finish("ok", self.plan.keep_alive)

    def _end_with_fault(self, due_ns: int) -> None:
        if self.fault_end is FaultKind.ERROR_EVENT:
            if not self.streaming:
                body = text.error_event("simulated engine error" + self.plan.echo)[6:-2]
                self._send(_json_head(500, len(body), self) + body, 0, due_ns)
                self.status = 500
                self._finish("http_error", self.plan.keep_alive)
                return
            msg = f"simulated engine error after {self.generated} tokens{self.plan.echo}"
            tail = self.fmt.error(msg)
            self._write_events(due_ns, tail + self.fmt.done_event(), final=True)
            self._finish("error_event", self.plan.keep_alive)
            return
        if self._events:  # reset: deliver what is complete, then RST
            self._write_events(due_ns, b"", final=False)
        self._finish("reset", False, reset=True)

    def _finish(self, outcome: str, keep_alive: bool, reset: bool = False) -> None:
        if self.finished:
            return
        self.finished = True
        st = self.state
        st.active.discard(self)
        st.truth.add(self.record(outcome))
        if reset:
            sock = self.t.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            self.t.abort()
            return
        self._on_done(keep_alive)

    def abandon(self, outcome: str) -> None:
        """The client left, or the server is shutting down: free the slot, log, close."""
        if self.finished:
            return
        self.state.engine.cancel(self)
        self.finished = True
        self.state.active.discard(self)
        self.state.truth.add(self.record(outcome))
        if outcome == "shutdown":
            self.t.abort()

    def record(self, outcome: str) -> dict[str, Any]:
        p = self.plan
        return {
            "type": "request",
            "request_id": p.request_id,
            "path": p.path,
            "stream": self.streaming,
            "status": self.status,
            "outcome": outcome,
            "faults": describe(self.faults) + self.labels,
            "prompt_tokens": p.prompt_tokens,
            "max_tokens": p.max_tokens,
            "completion_tokens": sum(self.chunk_tokens),
            "reasoning_tokens": self.reasoning,
            "headers_ns": p.headers_ns,
            "request_ns": p.request_ns,
            "response_headers_ns": self.response_headers_ns,
            "chunk_ns": self.chunk_ns,
            "chunk_tokens": self.chunk_tokens,
            "chunk_due_ns": self.chunk_due_ns,
            "chunk_write_us": self.chunk_write_us,
            "end_ns": time.perf_counter_ns(),
        }

    # ---- trickle -----------------------------------------------------------------------------
    def _open_trickle(self, now_ns: int) -> None:
        """A valid SSE stream written one byte per `arg` seconds; it never uses the engine."""
        self._trickle = TrickleBody.of(
            self.fmt, self.plan.chat, self.offset, self.prompt_tokens, self.max_tokens
        )
        head = response_head(
            200,
            self.fmt.stream_type,
            length=None,
            keep_alive=self.plan.keep_alive,
            keepalive_header=self.state.cfg.keepalive_header,
            extra=self.plan.head_headers(),
        )
        self.t.write(head)
        self.response_headers_ns = time.perf_counter_ns()
        self._trickle_ns = int(_arg(self.faults, FaultKind.TRICKLE, 4.0) * 1e9)
        self.state.sched.at(now_ns + self._trickle_ns, self._trickle_write)

    def _trickle_write(self, due_ns: int) -> None:
        if self.finished or self._trickle is None:
            return
        payload, tokens, done = self._trickle.next_write()
        self._send(payload, tokens, due_ns)
        if done:
            self._finish("ok", self.plan.keep_alive)
        else:
            self.state.sched.at(due_ns + self._trickle_ns, self._trickle_write)


def _arg(faults: Faults, kind: FaultKind, default: float) -> float:
    if kind not in faults:
        return default
    a = faults[kind]
    return default if a is None or not math.isfinite(a) else a


def _json_head(status: int, length: int, c: Completion) -> bytes:
    return response_head(
        status,
        "application/json",
        length=length,
        keep_alive=c.plan.keep_alive,
        keepalive_header=c.state.cfg.keepalive_header,
        extra=c.plan.head_headers(),
    )
