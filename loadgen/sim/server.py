"""The simulated engine's server: raw asyncio Protocol connections, routing of the OpenAI-style
endpoints plus /health, /v1/models and /metrics, request validation, and `serve`/`run`.
"""

from __future__ import annotations

import asyncio
import gc
import html
import json
import math
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from loadgen.sim import audio as sim_audio
from loadgen.sim import params, protocols, text
from loadgen.sim.config import FaultKind, SimConfig
from loadgen.sim.engine import BatchEngine, FixedEngine, Scheduler, make_engine
from loadgen.sim.faults import FAULT_HEADER, RateLimiter, choose_faults
from loadgen.sim.http import CONTINUE, HttpParseError, Request, RequestParser, response_head
from loadgen.sim.plan import Plan
from loadgen.sim.stream import Completion
from loadgen.sim.truth import TruthLog

REQUEST_ID_HEADER = "x-peakload-request-id"
GC_GEN0_THRESHOLD = 20_000
HTML_PAGE = (
    "<html><head><title>{status} Error</title></head><body><center><h1>{status} Error</h1>"
    "</center><hr><center>nginx</center>{echo}</body></html>"
)


class SimState:
    """Everything shared by the connections of one server (one event loop)."""

    def __init__(self, cfg: SimConfig, loop: asyncio.AbstractEventLoop, truth: TruthLog) -> None:
        self.cfg = cfg
        self.loop = loop
        self.truth = truth
        self.sched = Scheduler(loop, cfg)
        self.engine: FixedEngine | BatchEngine = make_engine(cfg, self.sched)
        self.limiter = RateLimiter(cfg)
        self.active: set[Completion] = set()
        self.connections: set[Connection] = set()
        self.tokens_generated = 0
        self.prompt_tokens_total = 0
        self.requests_seen = 0

    def metrics(self) -> bytes:
        """Prometheus text exposition of the engine's gauges and counters."""
        eng = self.engine
        kv = eng.kv_used / self.cfg.kv_capacity_tokens if isinstance(eng, BatchEngine) else 0.0
        rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            ("num_requests_running", "gauge", "Sequences generating.", [("", eng.running)]),
            ("num_requests_waiting", "gauge", "Queued for a slot or KV.", [("", eng.waiting)]),
            ("kv_cache_usage_perc", "gauge", "KV budget in use (0-1).", [("", kv)]),
            ("active_responses", "gauge", "Completion responses open.", [("", len(self.active))]),
            ("generation_tokens_total", "counter", "Tokens.", [("", self.tokens_generated)]),
            ("prompt_tokens_total", "counter", "Prompt tokens.", [("", self.prompt_tokens_total)]),
            (
                "requests_total",
                "counter",
                "Finished completion requests by HTTP status.",
                [(f'status="{k}"', v) for k, v in sorted(self.truth.by_status.items())],
            ),
            (
                "request_outcomes_total",
                "counter",
                "Finished completion requests by outcome.",
                [(f'outcome="{k}"', v) for k, v in sorted(self.truth.by_outcome.items())],
            ),
            (
                "faults_total",
                "counter",
                "Faults applied, by kind.",
                [(f'kind="{k}"', v) for k, v in sorted(self.truth.by_fault.items())],
            ),
        ]
        out: list[str] = []
        for name, kind, help_text, samples in rows:
            out.append(f"# HELP peakload_sim:{name} {help_text}")
            out.append(f"# TYPE peakload_sim:{name} {kind}")
            for labels, value in samples:
                lab = "{" + labels + "}" if labels else ""
                out.append(f"peakload_sim:{name}{lab} {value:g}")
        for name, help_text, hist in (
            ("time_to_first_token_seconds", "Arrival to first token (s).", eng.ttft),
            ("request_queue_time_seconds", "Arrival to admission (s).", eng.queue_time),
        ):
            out.append(f"# HELP peakload_sim:{name} {help_text}")
            out.append(f"# TYPE peakload_sim:{name} histogram")
            out.extend(hist.lines(f"peakload_sim:{name}"))
        return ("\n".join(out) + "\n").encode()


class Connection(asyncio.Protocol):
    """One client connection: parses requests and answers them one at a time, in order."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self.parser = RequestParser()
        self.current: Completion | None = None
        self.closed = False
        self._dispatching = False
        self._bad: HttpParseError | None = None
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = cast(asyncio.Transport, transport)  # uvloop's is not a subclass, same API
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._idle is not None:
            self._idle.cancel()
        self.state.connections.discard(self)
        if self.current is not None:
            self.current.abandon("client_closed")
            self.current = None

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._bad is not None:
            return  # after a malformed request nothing more is read
        try:
            self.parser.feed(data, now)
        except HttpParseError as e:
            self._bad = e  # answered (then closed) once the requests before it are done
        if self.parser.expect_continue and self.current is None and not self.parser.ready:
            self.parser.expect_continue = False
            self.t.write(CONTINUE)
        self._next()

    def _next(self) -> None:
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self.current is None and self.parser.ready and not self.closed:
                self._dispatch(self.parser.ready.popleft())
            if self.current is None and self._bad is not None and not self.closed:
                e = self._bad
                self._reply_json(e.status, {"error": {"message": str(e), "code": e.status}}, False)
        finally:
            self._dispatching = False

    def _done(self, keep_alive: bool) -> None:
        c, self.current = self.current, None
        streamed = c is not None and c.streaming and c.reject is None
        if not keep_alive or self._closes_after(streamed):
            self.closed = True
            self.t.close()
        else:
            self._next()
            self._arm_idle()

    def _closes_after(self, streamed: bool) -> bool:
        """Whether this server closes a connection it said it would keep (see SimConfig)."""
        mode = self.state.cfg.close_after
        return mode == "response_silent" or (mode == "stream" and streamed)

    def _arm_idle(self) -> None:
        """Close the connection if no request starts within `idle_close_s` of now."""
        idle_s = self.state.cfg.idle_close_s
        if idle_s > 0 and not self.closed and self.current is None and not self.parser.ready:
            self._idle = self.state.loop.call_later(idle_s, self._idle_close)

    def _idle_close(self) -> None:
        self._idle = None
        if self.current is None and not self.closed:
            self.closed = True
            self.t.close()

    def _reply(self, status: int, ctype: str, body: bytes, keep_alive: bool) -> None:
        head = response_head(
            status,
            ctype,
            length=len(body),
            keep_alive=keep_alive,
            keepalive_header=self.state.cfg.keepalive_header,
        )
        self.t.write(head + body)
        if not keep_alive or self._closes_after(False):
            self.closed = True
            self.t.close()
        else:
            self._arm_idle()

    def _reply_json(self, status: int, obj: Any, keep_alive: bool) -> None:
        self._reply(status, "application/json", json.dumps(obj).encode(), keep_alive)

    def _echo(self, req: Request) -> str:
        """What an echoing gateway (`echo_request`) adds to an error message, else ""."""
        if not self.state.cfg.echo_request:
            return ""
        heads = "; ".join(f"{k}: {v}" for k, v in reversed(req.headers.items()))  # ours first
        return f" [request: {req.method} {req.target or req.path} headers: {heads}]"

    def _dispatch(self, req: Request) -> None:
        if self.state.cfg.close_after == "response":
            req.keep_alive = False  # `Connection: close` on the answer, then close
        api = protocols.route(req.path)
        if api is not None and protocols.served(self.state.cfg.protocol, api):
            if req.method != "POST":
                self._reply_json(
                    405, _err(f"{req.path} takes POST{self._echo(req)}"), req.keep_alive
                )
                return
            self._completion(req, api)
        elif req.path == "/health":
            self._reply_json(200, {"status": "ok"}, req.keep_alive)
        elif req.path == "/v1/models":
            model = {"id": self.state.cfg.model, "object": "model", "created": 0}
            model["owned_by"] = "peakload-sim"
            self._reply_json(200, {"object": "list", "data": [model]}, req.keep_alive)
        elif req.path in ("/api/tags", "/info") or (
            req.path.startswith("/v2/models/") and req.path.endswith("/ready")
        ):  # the native APIs' model list / info / readiness
            model = {"name": self.state.cfg.model, "model": self.state.cfg.model}
            self._reply_json(200, {"models": [model], "model_id": model["name"]}, req.keep_alive)
        elif req.path == "/metrics":
            self._reply(200, "text/plain; version=0.0.4", self.state.metrics(), req.keep_alive)
        else:
            self._reply_json(
                404, _err(f"no route {req.method} {req.path}{self._echo(req)}"), req.keep_alive
            )

    def _completion(self, req: Request, api: str) -> None:
        st = self.state
        st.requests_seen += 1
        rid = req.headers.get(REQUEST_ID_HEADER) or f"sim-{st.cfg.seed}-{st.requests_seen}"
        chat = protocols.is_chat(api)
        plan = Plan(rid, req.path, chat, False, False, 0, 0, req.keep_alive, req.headers_ns, 0)
        plan.api = api
        plan.request_ns = req.received_ns
        plan.echo = echo = self._echo(req)
        reject: tuple[int, bytes, dict[str, str], str] | None = None
        labels: list[str] = []
        faults: dict[FaultKind, float | None] = {}
        try:
            _fill_plan(plan, req.body, st.cfg, req.headers.get("content-type", ""))
            faults = choose_faults(st.cfg, rid, st.requests_seen, req.headers.get(FAULT_HEADER))
            need = plan.prompt_tokens + plan.max_tokens
            if isinstance(st.engine, BatchEngine) and need > st.cfg.kv_capacity_tokens:
                raise text.BadRequest(
                    f"prompt ({plan.prompt_tokens}) + max_tokens ({plan.max_tokens}) exceeds "
                    f"the KV capacity of {st.cfg.kv_capacity_tokens} tokens"
                )
        except text.BadRequest as e:
            reject = (400, json.dumps(_err(f"{e}{echo}", 400)).encode(), {}, "bad_request")
        if reject is None:
            wait_s = st.limiter.admit(req.received_ns, plan.prompt_tokens + plan.max_tokens)
            plan.extra_headers.update(st.limiter.headers())
            if wait_s is not None:
                labels.append("rate_limit")
                reject = _status_reply(429, float(math.ceil(wait_s)), echo)
            elif FaultKind.HTTP_429 in faults:
                reject = _status_reply(429, faults[FaultKind.HTTP_429], echo)
            elif FaultKind.HTTP_503 in faults:
                reject = _status_reply(503, faults[FaultKind.HTTP_503], echo)
            elif FaultKind.HTML_ERROR in faults:
                status = int(faults[FaultKind.HTML_ERROR] or 200)
                page = HTML_PAGE.format(status=status, echo=html.escape(echo)).encode()
                reject = (status, page, {"content-type": "text/html; charset=utf-8"}, "html_error")
        st.prompt_tokens_total += plan.prompt_tokens
        c = Completion(st, self.t, plan, faults, self._done, reject=reject, labels=labels)
        self.current = c
        st.active.add(c)
        st.sched.now_or_stalled(c.open)


def _fill_plan(plan: Plan, raw: bytes, cfg: SimConfig, content_type: str = "") -> None:
    if plan.api == sim_audio.TRANSCRIPTION:  # a multipart upload, not JSON
        _set_plan(plan, sim_audio.transcription_fields(raw, content_type, cfg), cfg)
        return
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise text.BadRequest(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise text.BadRequest("request body must be a JSON object")
    if plan.api in ("openai-chat", "openai-completions"):
        stream = body.get("stream", False)
        mt = body.get("max_completion_tokens", body.get("max_tokens", cfg.default_max_tokens))
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise text.BadRequest("'stream_options' must be an object")
        include_usage = bool(opts.get("include_usage", False))
        count = text.chat_prompt_tokens if plan.chat else text.completion_prompt_tokens
        prompt_tokens = count(body)
        plan.effects = params.check(cfg.params, body)
        if params.mode_of(cfg.params, "stream") == "ignore":
            stream = False
        if params.mode_of(cfg.params, "include_usage") == "ignore":
            include_usage = False
    elif plan.api == sim_audio.SPEECH:
        _set_plan(plan, sim_audio.speech_fields(body, cfg), cfg)
        return
    else:
        f = protocols.request_fields(plan.api, body, plan.path, cfg.default_max_tokens)
        stream, mt, include_usage = f["stream"], f["max_tokens"], f["include_usage"]
        prompt_tokens = f["prompt_tokens"]
    if not isinstance(stream, bool):
        raise text.BadRequest("'stream' must be true or false")
    if mt is None:
        mt = cfg.default_max_tokens
    if isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= cfg.max_tokens_limit:
        raise text.BadRequest(f"'max_tokens' must be an integer in 1..{cfg.max_tokens_limit}")
    plan.stream = stream
    plan.include_usage = include_usage
    plan.max_tokens = min(params.plan_tokens(plan.effects, cfg.params, mt), cfg.max_tokens_limit)
    plan.prompt_tokens = prompt_tokens


def _set_plan(plan: Plan, f: dict[str, Any], cfg: SimConfig) -> None:
    """An audio request's plan: its answer's length in tokens is the audio's, not a cap."""
    plan.stream, plan.include_usage = f["stream"], f["include_usage"]
    plan.max_tokens = min(int(f["max_tokens"]), cfg.max_tokens_limit)
    plan.prompt_tokens = int(f["prompt_tokens"])
    plan.audio = f["audio"]


def _err(message: str, code: int = 0) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code or None}}


Reject = tuple[int, bytes, dict[str, str], str]


def _status_reply(status: int, retry_after_s: float | None, echo: str = "") -> Reject:
    extra: dict[str, str] = {}
    if retry_after_s is not None:
        extra["retry-after"] = str(max(0, math.ceil(retry_after_s)))
        extra["retry-after-ms"] = str(int(retry_after_s * 1000))
    kind = "rate_limit_exceeded" if status == 429 else "service_unavailable"
    body = {"error": {"message": f"simulated {status}{echo}", "type": kind, "code": status}}
    return status, json.dumps(body).encode(), extra, "http_error"


def base_url(host: str, port: int, path: str = "/v1") -> str:
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


async def serve(
    config: SimConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    *,
    truth_log: Path | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until `stop` is set (or the task is cancelled). `ready(base_url)` is called once
    listening, with the bound port (so port 0 works). The truth log is flushed and closed, with
    its summary line, on the way out; open streams are logged as `shutdown` and aborted.
    """
    loop = asyncio.get_running_loop()
    truth = TruthLog(truth_log, config.truth_flush_ms / 1000)
    state = SimState(config, loop, truth)
    server = await loop.create_server(lambda: Connection(state), host, port, backlog=4096)
    truth.start(loop)
    try:
        bound = server.sockets[0].getsockname()[1]
        if ready is not None:
            ready(base_url(host, bound, protocols.base_path(config.protocol)))
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        server.close()
        for c in list(state.active):
            c.abandon("shutdown")
        for conn in list(state.connections):
            conn.t.close()
        state.sched.close()
        truth.close()


def run(
    config: SimConfig,
    host: str,
    port: int,
    ready: Callable[[str], None] | None = None,
    truth_log: Path | None = None,
) -> None:
    """Run `serve` in the foreground (uvloop when installed) until SIGINT or SIGTERM."""

    async def main() -> None:
        # Objects alive after start-up never need collecting; a larger young generation makes
        # collections rarer (each token allocates a heap entry), keeping pauses off the schedule.
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, host, port, ready, truth_log=truth_log, stop=stop)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main())
    else:
        uvloop.run(main())
