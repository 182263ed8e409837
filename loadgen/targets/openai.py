"""`OpenAITarget`: the `Target` for OpenAI-compatible `/chat/completions` and `/completions`
endpoints, over either HTTP transport (`raw`: asyncio Protocols, the default; `httpx`). It adds
auth and ids to the workload's body, checks the response head and turns SSE into StreamEvents.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from loadgen.errors import (
    HttpStatusError,
    PhaseTimeout,
    PreflightError,
    SpecError,
    StreamProtocolError,
    TransportError,
)
from loadgen.spec import TargetSpec
from loadgen.target import Clock, EventKind, PreparedRequest, StreamEvent
from loadgen.targets.http_common import (
    StaleConnection,
    StreamTruncated,
    display_url,
    parse_retry_after,
)
from loadgen.targets.httpx_transport import HttpxClient, HttpxExchange
from loadgen.targets.openai_stream import OpenAIStreamDecoder, body_summary, decode_body
from loadgen.targets.policy import TargetPolicy
from loadgen.targets.rawhttp import DEFAULT_KEEPALIVE_EXPIRY_S, RawExchange, RawPool
from loadgen.targets.sse import SSEParser

TRANSPORTS = ("auto", "raw", "httpx")
AUTO_TRANSPORT = "raw"  # measured faster per chunk: see bench/RESULTS.md (transport overhead)
ERROR_BODY_BYTES = 4096  # how much of a non-2xx / unexpected body is read for the detail
MAX_JSON_BODY_BYTES = 64 * 1024 * 1024
DRAIN_GRACE_S = 1.0  # after [DONE], how long to wait for the body's end before dropping the socket
USER_AGENT = "peakload/0.1"
_OUTPUT = (EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL)


class OpenAITarget:
    """Streams one `PreparedRequest` to `{base_url}/chat/completions` (api `openai-chat`) or
    `{base_url}/completions` (`openai-completions`).

    The body is the workload's `request.body`; the target only adds `model`, `stream` (from the
    spec) and, when streaming with `include_usage`, `stream_options: {"include_usage": true}` —
    each only if absent. Headers: content-type, accept, `x-peakload-request-id`, the spec's
    headers, and `Authorization: Bearer $<api_key_env>` read once here (a missing variable raises
    PreflightError naming it; the key never appears in an error, a repr or a log).

    A streaming request expects `text/event-stream`; anything else (HTML, or JSON from a server
    that ignored `stream: true`) raises StreamProtocolError naming what came back — TTFT would
    otherwise silently equal the whole response time. `stream=false` parses the JSON body.
    Timeouts: `connect_timeout_s` (spec) for connecting; `request.deadline_s` for the whole
    request (before the head -> phase `headers`, after -> `deadline`); `request.idle_timeout_s`
    between reads after the head (phase `first_token` until the first output delta, then `idle`).
    `policy`, when given, is checked against `base_url` first (PolicyError); the raw transport
    resolves the host again at connect time, so the check does not pin the address.
    """

    def __init__(
        self,
        spec: TargetSpec,
        *,
        max_connections: int,
        transport: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
        environ: Mapping[str, str] | None = None,
        policy: TargetPolicy | None = None,
    ) -> None:
        if policy is not None:  # PolicyError before anything else is set up
            policy.check(spec.base_url)
        transport = spec.transport if transport is None else transport
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1 (got {max_connections})")
        self.spec = spec
        self.transport = AUTO_TRANSPORT if transport == "auto" else transport
        base = urlsplit(spec.base_url)
        path = "/chat/completions" if spec.api == "openai-chat" else "/completions"
        query = f"?{base.query}" if base.query else ""
        host = base.hostname or ""
        if not host:
            raise SpecError(f"no host in {spec.base_url!r}", "target.base_url")
        port = base.port or (443 if base.scheme == "https" else 80)
        self.url = f"{base.scheme}://{base.netloc}{base.path.rstrip('/')}{path}{query}"
        self.models_url = f"{base.scheme}://{base.netloc}{base.path.rstrip('/')}/models{query}"
        self.display_url = display_url(self.url)
        self._secret = ""
        if spec.api_key_env:
            env = os.environ if environ is None else environ
            value = env.get(spec.api_key_env, "")
            if not value:
                raise PreflightError(
                    f"target.api_key_env names {spec.api_key_env}, which is not set (or empty) "
                    "in this environment: export it before running"
                )
            self._secret = value
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "accept-encoding": "identity",  # chunk arrival is the measurement: no compression
            "user-agent": USER_AGENT,
        }
        for name, value in spec.headers.items():
            if any(c in name + value for c in "\r\n\0") or not name.strip():
                raise SpecError(f"header {name!r} has a control character", "target.headers")
            headers[name.lower()] = value
        if self._secret and spec.api_key_query:
            sep = "&" if query else "?"
            query = f"{query}{sep}{quote(spec.api_key_query)}={quote(self._secret, safe='')}"
            self.url = f"{base.scheme}://{base.netloc}{base.path.rstrip('/')}{path}{query}"
        elif self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        self._headers = headers
        host_header = f"[{host}]" if ":" in host else host
        if base.port is not None:
            host_header += f":{base.port}"
        target = f"{base.path.rstrip('/')}{path}{query}"
        self._head_prefix = (
            f"POST {target} HTTP/1.1\r\nhost: {host_header}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        ).encode("latin-1")
        if ssl_context is None and base.scheme == "https":
            ssl_context = ssl.create_default_context()
        self._pool: RawPool | None = None
        self._httpx: HttpxClient | None = None
        if self.transport == "raw":
            self._pool = RawPool(
                host,
                port,
                ssl_context=ssl_context if base.scheme == "https" else None,
                max_connections=max_connections,
                connect_timeout_s=spec.connect_timeout_s,
                keepalive_expiry_s=keepalive_expiry_s,
            )
        else:
            self._httpx = HttpxClient(
                max_connections=max_connections,
                connect_timeout_s=spec.connect_timeout_s,
                ssl_context=ssl_context,
                keepalive_expiry_s=keepalive_expiry_s,
            )

    def __repr__(self) -> str:
        return f"OpenAITarget({self.display_url}, model={self.spec.model!r}, {self.transport})"

    def encode(self, request: PreparedRequest) -> tuple[bytes, bool]:
        """The JSON body to send and whether the response will stream."""
        body: dict[str, Any] = request.body
        streaming = bool(body.get("stream", self.spec.stream))
        add_opts = streaming and self.spec.include_usage and "stream_options" not in body
        if "model" not in body or "stream" not in body or add_opts:
            body = {"model": self.spec.model, "stream": streaming, **body}
            if add_opts:
                body["stream_options"] = {"include_usage": True}
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return data, streaming

    def _exchange(
        self, request: PreparedRequest, data: bytes, clock: Clock
    ) -> RawExchange | HttpxExchange:
        if self._pool is not None:
            extra = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
            if not self._pool.reuse:  # the server closes after each response: say we know
                extra += "connection: close\r\n"
            head = b"%s%sx-peakload-request-id: %s\r\ncontent-length: %d\r\n\r\n" % (
                self._head_prefix,
                extra.encode("latin-1"),
                request.request_id.encode("latin-1"),
                len(data),
            )
            return RawExchange(
                self._pool, head + data, clock, request.deadline_s, request.idle_timeout_s
            )
        assert self._httpx is not None
        headers = {**self._headers, "x-peakload-request-id": request.request_id}
        headers.update(request.headers)
        return HttpxExchange(
            self._httpx,
            self.url,
            headers,
            data,
            clock,
            request.deadline_s,
            request.idle_timeout_s,
        )

    async def stream(self, request: PreparedRequest, clock: Clock) -> AsyncIterator[StreamEvent]:
        """SENT, HEADERS, then CONTENT/REASONING/TOOL_CALL/USAGE events, then DONE; failures
        raise from the transport family of loadgen.errors after every earlier event was yielded.
        """
        data, streaming = self.encode(request)
        ex = self._exchange(request, data, clock)
        saw_output = False
        try:
            sent = await ex.send()
            if ex.resent:  # (httpx re-sends inside send())
                yield StreamEvent(EventKind.RESENT, sent, text="reused connection was closed")
            yield StreamEvent(EventKind.SENT, sent, connect_ns=ex.connect_ns)
            try:
                head = await ex.head()
            except StaleConnection as e:
                # the connection was dead before any byte came back: not the server's failure
                # to answer this request, which is sent once more on a new connection
                yield StreamEvent(EventKind.RESENT, e.t_ns or clock(), text=e.detail)
                assert isinstance(ex, RawExchange)
                yield StreamEvent(EventKind.SENT, await ex.resend(), connect_ns=ex.connect_ns)
                head = await ex.head()
            yield StreamEvent(EventKind.HEADERS, head.t_ns, status=head.status)
            ctype = head.headers.get("content-type", "")
            if not 200 <= head.status < 300:
                ex.expect_end(DRAIN_GRACE_S)  # the detail is not worth waiting an idle timeout
                raw = await ex.read_some(ERROR_BODY_BYTES)
                detail = body_summary(raw, ctype) if raw else ""
                if 300 <= head.status < 400:
                    detail = "redirect not followed" + (f": {detail}" if detail else "")
                raise HttpStatusError(
                    head.status,
                    detail,
                    retry_after_s=parse_retry_after(head.headers.get("retry-after")),
                    t_ns=head.t_ns,
                )
            encoding = head.headers.get("content-encoding", "identity").lower()
            if encoding not in ("identity", ""):
                raise StreamProtocolError(
                    f"compressed response (content-encoding: {encoding[:40]}) although "
                    "identity was asked for: turn compression off for this endpoint",
                    t_ns=head.t_ns,
                )
            if streaming:
                if ctype and not ctype.lower().startswith("text/event-stream"):
                    raise await self._unexpected(ex, ctype, head.t_ns, streaming=True)
                parser = SSEParser()
                decoder = OpenAIStreamDecoder()
                out: list[StreamEvent] = []
                try:
                    async for t, chunk in ex.body():
                        try:
                            payloads = parser.feed(chunk)
                            for payload in payloads:
                                decoder.decode(payload, t, out)
                        except TransportError:
                            # tokens that came in the same read as an in-band error are kept
                            for ev in out:
                                yield ev
                            raise
                        if out:
                            if ex.lo >= 0:
                                _mark_spread(out, t - ex.lo if len(payloads) > 1 else 0)
                            if not saw_output:
                                saw_output = any(ev.kind in _OUTPUT for ev in out)
                            for ev in out:
                                yield ev
                            out = []
                            if decoder.done:
                                ex.expect_end(DRAIN_GRACE_S)
                except TransportError:
                    if not decoder.done:
                        raise
                    return  # after DONE: the response is complete, only the socket is lost
                if not decoder.done:  # the body ended: a held CR may still complete [DONE]
                    tail, _ = parser.finish()
                    t_end = clock()
                    for payload in tail:
                        decoder.decode(payload, t_end, out)
                    for ev in out:
                        yield ev
                    if not decoder.done:
                        raise StreamTruncated("stream ended without [DONE]", t_ns=t_end)
            else:
                if "json" not in ctype.lower():
                    raise await self._unexpected(ex, ctype, head.t_ns, streaming=False)
                parts: list[bytes] = []
                size, last = 0, head.t_ns
                async for t, chunk in ex.body():
                    last = t
                    parts.append(chunk)
                    size += len(chunk)
                    if size > MAX_JSON_BODY_BYTES:
                        raise StreamProtocolError(f"JSON body over {MAX_JSON_BODY_BYTES} bytes")
                for ev in decode_body(b"".join(parts), last):
                    yield ev
        except PhaseTimeout as e:
            if e.phase == "idle" and not saw_output:
                raise PhaseTimeout(
                    "first_token",
                    f"no output token within {request.idle_timeout_s:.3g} s of "
                    "the headers or last read",
                    t_ns=e.t_ns,
                ) from None
            raise
        except TransportError as e:
            raise self._scrub(e) from None
        finally:
            await ex.aclose()

    async def _unexpected(
        self, ex: RawExchange | HttpxExchange, ctype: str, t_ns: int, *, streaming: bool
    ) -> StreamProtocolError:
        """The error for a 2xx response of the wrong content type, with a summary of its body."""
        ex.expect_end(DRAIN_GRACE_S)
        raw = await ex.read_some(ERROR_BODY_BYTES)
        main = ctype.split(";")[0].strip().lower()
        what = body_summary(raw, ctype) if raw else "empty body"
        expected = "text/event-stream" if streaming else "JSON"
        if streaming and "json" in main:
            why = "the server ignored stream=true (not a streaming server?)"
        elif "html" in main:
            why = f"HTML instead of {'SSE' if streaming else 'JSON'} (a proxy or web page here?)"
        else:
            why = f"expected {expected}"
        return StreamProtocolError(f"got {main}: {why}; body: {what}", t_ns=t_ns)

    def _scrub(self, e: TransportError) -> TransportError:
        """Remove the key from a server-derived detail (a server may echo our headers)."""
        key = self._secret
        if key and any(key in str(a) for a in (e.detail, *e.args)):
            e.detail = e.detail.replace(key, "[redacted]")
            e.args = tuple(
                a.replace(key, "[redacted]") if isinstance(a, str) else a for a in e.args
            )
        return e

    async def warm(self, connections: int) -> None:
        """Open up to `connections` keep-alive connections (raw: TCP/TLS connects; httpx:
        concurrent `GET {base_url}/models`). Raises the transport errors of a failed connect."""
        if self._pool is not None:
            await self._pool.warm(connections, self.spec.connect_timeout_s)
        elif self._httpx is not None:
            await self._httpx.warm(self.models_url, self._headers, connections)

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._httpx is not None:
            await self._httpx.aclose()


def _mark_spread(events: list[StreamEvent], window_ns: int) -> None:
    """Kernel-stamped read: its output events get the read's stamp (its last segment's), exact
    when the read carried one output event. With several, an earlier one may have come up to
    `window_ns` before it (since the socket was last drained): the kernel keeps one stamp for
    segments that queue up together, whether the server wrote them together or the loop was
    late to read them. Non-output events after the last token (usage, [DONE]) are taken to
    follow it at once, as servers write them."""
    outputs = [ev for ev in events if ev.kind in _OUTPUT]
    spread = window_ns if len(outputs) > 1 else 0
    for ev in outputs:
        ev.spread_ns = spread
