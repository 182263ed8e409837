"""`OpenAITarget`: the `Target` for every HTTP API peakload speaks (OpenAI chat/completions and
Responses, Ollama, TGI, llama.cpp, Triton: `loadgen.targets.apis`), over either transport
(`raw`: asyncio Protocols, the default; `httpx`) through one contract (`transport.Exchange`).
It adds auth and ids, checks the response head, frames the body (SSE or NDJSON) and lets the
API's decoder turn payloads into StreamEvents.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping
from urllib.parse import quote, urlsplit

from loadgen.errors import (
    HttpStatusError,
    PhaseTimeout,
    PreflightError,
    SpecError,
    StreamProtocolError,
    TransportError,
)
from loadgen.runspec.secrets import secret_values
from loadgen.runspec.target_spec import TargetSpec
from loadgen.scrub import scrub
from loadgen.target import Clock, EventKind, PreparedRequest, ServerTimings, StreamEvent, Usage
from loadgen.targets.apis import Api, api_for
from loadgen.targets.apis.base import stream_decoder
from loadgen.targets.framing import NDJSONParser, RawParser
from loadgen.targets.http_common import StreamTruncated, display_url
from loadgen.targets.httpx_transport import HttpxTransport
from loadgen.targets.openai_stream import body_summary
from loadgen.targets.ratelimit import rate_limit_of
from loadgen.targets.rawhttp import DEFAULT_KEEPALIVE_EXPIRY_S, RawPool
from loadgen.targets.rawtransport import RawTransport
from loadgen.targets.sse import SSEParser
from loadgen.targets.structured import StructuredOutputError, structured_check
from loadgen.targets.transport import Exchange, HttpRequest, Transport

TRANSPORTS = ("auto", "raw", "httpx")
AUTO_TRANSPORT = "raw"  # measured faster per chunk: see bench/RESULTS.md (transport overhead)
ERROR_BODY_BYTES = 4096  # how much of a non-2xx / unexpected body is read for the detail
MAX_JSON_BODY_BYTES = 64 * 1024 * 1024
DRAIN_GRACE_S = 1.0  # after the stream's end, how long to wait for the body's end
USER_AGENT = "peakload/0.1"
_OUTPUT = (EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL)


class OpenAITarget:
    """Streams one `PreparedRequest` to `{base_url}{api.path}` for the spec's `api`.

    The body is the workload's `request.body`; the API module adds what its wire format needs
    (OpenAI: `model`, `stream`, `stream_options.include_usage`, each only if absent). Headers:
    content-type, accept, `x-peakload-request-id`, the spec's headers, and `Authorization:
    Bearer $<api_key_env>` read once here (a missing variable raises PreflightError naming it;
    the key never appears in an error, a repr or a log).

    A streaming request expects the API's streaming content type; anything else (HTML, or JSON
    from a server that ignored `stream: true`) raises StreamProtocolError naming what came back
    — TTFT would otherwise silently equal the whole response time. `stream=false` parses the
    JSON body. Timeouts: `connect_timeout_s` (spec) for connecting; `request.deadline_s` for the
    whole request (before the head -> phase `headers`, after -> `deadline`);
    `request.idle_timeout_s` between reads after the head (phase `first_token` until the first
    output delta, then `idle`). The target policy is not checked here: build it with
    `loadgen.targets.factory.build_target`, which checks first.
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
    ) -> None:
        transport = spec.transport if transport is None else transport
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1 (got {max_connections})")
        self.spec = spec
        self.api: Api = api_for(spec.api)
        self.transport = AUTO_TRANSPORT if transport == "auto" else transport
        base = urlsplit(spec.base_url)
        host = base.hostname or ""
        if not host:
            raise SpecError(f"no host in {spec.base_url!r}", "target.base_url")
        port = base.port or (443 if base.scheme == "https" else 80)
        self._root = base.path.rstrip("/")
        self._query = f"?{base.query}" if base.query else ""
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
            "content-type": self.api.content_type,
            "accept": ", ".join(t + "*" if t.endswith("/") else t for t in self.api.stream_types),
            "accept-encoding": "identity",  # chunk arrival is the measurement: no compression
            "user-agent": USER_AGENT,
        }
        for name, value in spec.headers.items():
            if any(c in name + value for c in "\r\n\0") or not name.strip():
                raise SpecError(f"header {name!r} has a control character", "target.headers")
            headers[name.lower()] = value
        if self._secret and spec.api_key_query:
            sep = "&" if self._query else "?"
            key = f"{quote(spec.api_key_query)}={quote(self._secret, safe='')}"
            self._query = f"{self._query}{sep}{key}"
        elif self._secret:
            headers["authorization"] = f"Bearer {self._secret}"
        self._headers = headers
        secret_values(spec, {spec.api_key_env: self._secret} if spec.api_key_env else {})
        self._paths = {
            streaming: self._target(self.api.path(spec, streaming)) for streaming in (True, False)
        }
        origin = f"{base.scheme}://{base.netloc}"
        self.url = origin + self._paths[spec.stream]
        self.display_url = display_url(self.url)
        if ssl_context is None and base.scheme == "https":
            ssl_context = ssl.create_default_context()
        self._transport: Transport
        if self.transport == "raw":
            host_header = f"[{host}]" if ":" in host else host
            if base.port is not None:
                host_header += f":{base.port}"
            raw = RawTransport(
                host,
                port,
                host_header,
                headers,
                ssl_context=ssl_context if base.scheme == "https" else None,
                max_connections=max_connections,
                connect_timeout_s=spec.connect_timeout_s,
                keepalive_expiry_s=keepalive_expiry_s,
            )
            raw.pool.resend_on_stale = spec.resend_on_stale
            self._transport = raw
        else:
            self._transport = HttpxTransport(
                origin,
                headers,
                max_connections=max_connections,
                connect_timeout_s=spec.connect_timeout_s,
                ssl_context=ssl_context,
                keepalive_expiry_s=keepalive_expiry_s,
                resend_on_stale=spec.resend_on_stale,
            )

    def _target(self, path: str) -> str:
        """Origin-form request target of an API path (relative to the base URL's path)."""
        return f"{self._root}{path}{self._query}"

    def request_parts(self, streaming: bool) -> tuple[str, dict[str, str]]:
        """The URL (key included when it rides in the query) and headers (auth included) of a
        request: for the probe, which reads whole answers with a plain HTTP client."""
        base = urlsplit(self.spec.base_url)
        return f"{base.scheme}://{base.netloc}{self._paths[streaming]}", dict(self._headers)

    def scrub(self, text: str) -> str:
        """`text` without any secret this target sends (loadgen.scrub: a server may echo our
        headers or URL)."""
        return scrub(text)

    @property
    def _pool(self) -> RawPool | None:
        """The raw transport's pool (tests and diagnostics), None for httpx."""
        t = self._transport
        return t.pool if isinstance(t, RawTransport) else None

    @property
    def models_url(self) -> str:
        base = urlsplit(self.spec.base_url)
        return f"{base.scheme}://{base.netloc}{self._target(self.api.models_path(self.spec))}"

    def __repr__(self) -> str:
        return f"OpenAITarget({self.display_url}, model={self.spec.model!r}, {self.transport})"

    def encode(self, request: PreparedRequest) -> tuple[bytes, bool]:
        """The body to send and whether the response will stream."""
        return self.api.encode(self.spec, request)

    def exchange(
        self, request: PreparedRequest, data: bytes, clock: Clock, streaming: bool = True
    ) -> Exchange:
        headers = {"x-peakload-request-id": request.request_id}
        headers.update(request.headers)
        req = HttpRequest("POST", self._paths[streaming], headers, data, self.api.end_marker)
        return self._transport.exchange(req, clock, request.deadline_s, request.idle_timeout_s)

    async def stream(self, request: PreparedRequest, clock: Clock) -> AsyncIterator[StreamEvent]:
        """SENT, HEADERS, then CONTENT/REASONING/TOOL_CALL/USAGE events, then DONE; failures
        raise from the transport family of loadgen.errors after every earlier event was yielded.
        """
        data, streaming = self.encode(request)
        ex = self.exchange(request, data, clock, streaming)
        api = self.api
        saw_output = False
        try:
            async for sent in ex.open():
                if sent.resent:
                    yield StreamEvent(EventKind.RESENT, sent.resent_ns, text=sent.resent)
                yield StreamEvent(EventKind.SENT, sent.t_ns, connect_ns=sent.connect_ns)
            head = ex.head()
            limits = rate_limit_of(head.headers)
            yield StreamEvent(EventKind.HEADERS, head.t_ns, status=head.status, ratelimit=limits)
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
                    retry_after_s=limits.retry_after_s if limits is not None else None,
                    t_ns=head.t_ns,
                )
            encoding = head.headers.get("content-encoding", "identity").lower()
            if encoding not in ("identity", ""):
                raise StreamProtocolError(
                    f"compressed response (content-encoding: {encoding[:40]}) although "
                    "identity was asked for: turn compression off for this endpoint",
                    t_ns=head.t_ns,
                )
            timings = api.head_timings(head.headers)
            if streaming:
                low = ctype.lower()
                if ctype and not any(low.startswith(t) for t in api.stream_types):
                    raise await self._unexpected(ex, ctype, head.t_ns, streaming=True)
                framing, decoder = stream_decoder(api, ctype, request.body)
                parser: SSEParser | NDJSONParser | RawParser
                if framing == "sse":
                    parser = SSEParser()
                elif framing == "ndjson":
                    parser = NDJSONParser()
                else:
                    parser = RawParser()
                check = structured_check(request.body)
                out: list[StreamEvent] = []
                broken: StructuredOutputError | None = None
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
                                _mark_spread(out, t, ex, len(payloads) > 1)
                            if not saw_output:
                                saw_output = any(ev.kind in _OUTPUT for ev in out)
                            if check is not None:
                                check.feed(out)
                                if decoder.done and (why := check.error()) is not None:
                                    # raised after this try: its handler ends a stream quietly
                                    # once the end marker came, and this error came with it
                                    broken = StructuredOutputError(why, t_ns=t)
                                    break
                            for ev in out:
                                yield ev
                            out = []
                            if decoder.done:
                                ex.expect_end(DRAIN_GRACE_S)
                except TransportError:
                    if not decoder.done:
                        raise
                    return  # after DONE: the response is complete, only the socket is lost
                if broken is not None:
                    for ev in out:
                        if ev.kind != EventKind.DONE:
                            yield ev
                    raise broken
                if not decoder.done:  # the body ended: a held CR may still complete the end
                    tail, _ = parser.finish()
                    t_end = clock()
                    for payload in tail:
                        decoder.decode(payload, t_end, out)
                    if not decoder.done:
                        decoder.finish(t_end, out)
                    for ev in out:
                        yield ev
                    if not decoder.done:
                        raise StreamTruncated(f"stream ended without {_end_name(api)}", t_ns=t_end)
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
                events = api.decode_body(b"".join(parts), last)
                if timings is not None:
                    _attach_timings(events, timings, last)
                check = structured_check(request.body)
                if check is not None:
                    check.feed(events)
                    if (why := check.error()) is not None:
                        for ev in events:
                            if ev.kind != EventKind.DONE:
                                yield ev
                        raise StructuredOutputError(why, t_ns=last)
                for ev in events:
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
        self, ex: Exchange, ctype: str, t_ns: int, *, streaming: bool
    ) -> StreamProtocolError:
        """The error for a 2xx response of the wrong content type, with a summary of its body."""
        ex.expect_end(DRAIN_GRACE_S)
        raw = await ex.read_some(ERROR_BODY_BYTES)
        main = ctype.split(";")[0].strip().lower()
        what = body_summary(raw, ctype) if raw else "empty body"
        expected = " or ".join(self.api.stream_types) if streaming else "JSON"
        if streaming and "json" in main and self.api.framing == "sse":
            why = "the server ignored stream=true (not a streaming server?)"
        elif "html" in main:
            kind = self.api.framing.upper() if streaming else "JSON"
            why = f"HTML instead of {kind} (a proxy or web page here?)"
        else:
            why = f"expected {expected}"
        return StreamProtocolError(f"got {main}: {why}; body: {what}", t_ns=t_ns)

    def _scrub(self, e: TransportError) -> TransportError:
        """Remove every secret from a server-derived detail (a server may echo our headers)."""
        e.detail = scrub(e.detail)
        e.args = tuple(scrub(a) if isinstance(a, str) else a for a in e.args)
        return e

    async def warm(self, connections: int) -> None:
        """Open up to `connections` keep-alive connections (raw: TCP/TLS connects; httpx:
        concurrent GETs of the API's model list). Raises the transport errors of a failed
        connect."""
        await self._transport.warm(connections, self._target(self.api.models_path(self.spec)))

    async def aclose(self) -> None:
        await self._transport.aclose()


def _end_name(api: Api) -> str:
    return "[DONE]" if api.end_marker == b"[DONE]" else "its final event"


def _attach_timings(events: list[StreamEvent], timings: ServerTimings, t_ns: int) -> None:
    """Header timings (TGI's x-*-time) ride on the USAGE event, added before DONE if none."""
    for ev in events:
        if ev.kind == EventKind.USAGE and ev.usage is not None:
            if ev.usage.server is None:
                ev.usage.server = timings
            return
    at = len(events) - 1 if events and events[-1].kind == EventKind.DONE else len(events)
    events.insert(at, StreamEvent(EventKind.USAGE, t_ns, usage=Usage(server=timings)))


def _mark_spread(events: list[StreamEvent], t_ns: int, ex: Exchange, many: bool) -> None:
    """Kernel-stamped read: its output events get the read's stamp (its last segment's), exact
    when the read carried one output event, or several in one segment (`one_segment_reads`,
    asked only then: a system call). Otherwise an earlier one may have come before it by up to
    `t_ns - ex.lo` (`ex.lo_any` if the loop was woken late; see arrival): the kernel keeps one
    stamp for segments that queue up together, whether the server wrote them together or the
    loop was late to read them. Non-output events after the last token (usage, [DONE]) are taken
    to follow it at once, as servers write them."""
    outputs = [ev for ev in events if ev.kind in _OUTPUT]
    if many and len(outputs) > 1 and not ex.one_segment_reads():
        spread, wake = max(t_ns - ex.lo, 1), max(t_ns - ex.lo_any, 1)
    else:
        spread = wake = 0
    for ev in outputs:
        ev.spread_ns, ev.wake_spread_ns = spread, wake
