"""Preflight: one tiny streaming request (max_tokens=2) before a run, turning the usual set-up
mistakes (unreachable, wrong key, wrong path, non-streaming server, HTML) into one PreflightError
that names the URL (without credentials) and what to fix: a TLS handshake to a plain-HTTP port
and a web server that is not an API (405/501) are told apart from an unreachable or busy one."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from loadgen.errors import (
    HttpStatusError,
    InBandError,
    PhaseTimeout,
    PreflightError,
    StreamProtocolError,
    TransportError,
)
from loadgen.runspec.target_spec import SPEECH_API, TRANSCRIPTION_API
from loadgen.target import EventKind, PreparedRequest
from loadgen.targets import audio
from loadgen.targets.apis import is_chat
from loadgen.targets.failures import redact
from loadgen.targets.http_common import ConnectFailed, StreamReset, StreamTruncated
from loadgen.targets.openai import OpenAITarget

PREFLIGHT_DEADLINE_S = 60.0


def preflight_request(target: OpenAITarget) -> PreparedRequest:
    """The smallest request the API accepts: two output tokens, streaming unless the spec says
    `stream = false` (then the JSON body path is what gets checked)."""
    body: dict[str, Any] = {"max_tokens": 2, "stream": target.spec.stream}
    if target.spec.api == SPEECH_API:  # two words spoken, as raw 16-bit PCM
        body = {"input": "Say hi.", "voice": "alloy", "response_format": "pcm"}
    elif target.spec.api == TRANSCRIPTION_API:  # one second of silence (an empty transcript)
        silence = audio.wav_bytes(bytes(audio.PCM_RATE * audio.PCM_WIDTH))
        body = {"file": silence, "filename": "preflight.wav", "file_type": "audio/wav"}
    elif is_chat(target.spec.api):
        body["messages"] = [{"role": "user", "content": "Say hi."}]
    else:
        body["prompt"] = "Say hi."
    return PreparedRequest(
        request_id=f"preflight-{uuid.uuid4()}",
        body=body,
        max_tokens=2,
        deadline_s=min(target.spec.deadline_s, PREFLIGHT_DEADLINE_S),
        idle_timeout_s=min(target.spec.idle_timeout_s, PREFLIGHT_DEADLINE_S),
    )


PREFLIGHT_ATTEMPTS = 5
RETRY_PAUSE_S = 0.5
MAX_RETRY_AFTER_S = 5.0


class _Transient(PreflightError):
    """A failure a healthy-but-busy server may produce once (5xx, 429, in-band error, reset)."""

    def __init__(self, message: str, pause_s: float = RETRY_PAUSE_S) -> None:
        self.pause_s = pause_s
        super().__init__(message)


async def preflight(target: OpenAITarget) -> None:
    """Send one streaming request; return if it streamed to `[DONE]`, else raise PreflightError
    naming the URL and the likely fix. Failures a busy server produces now and then (5xx, 429,
    an in-band error, a reset) are tried again, up to PREFLIGHT_ATTEMPTS in all; refusals that
    no retry can fix (unreachable, 401/403/404, HTML, not streaming) fail at once."""
    for attempt in range(1, PREFLIGHT_ATTEMPTS + 1):
        try:
            await _preflight_once(target)
            return
        except _Transient as e:
            if attempt == PREFLIGHT_ATTEMPTS:
                raise PreflightError(f"{e} ({attempt} attempts)") from None
            await asyncio.sleep(e.pause_s)


async def _preflight_once(target: OpenAITarget) -> None:
    url = target.display_url
    kinds: list[EventKind] = []
    try:
        async for ev in target.stream(preflight_request(target), time.perf_counter_ns):
            kinds.append(ev.kind)
    except HttpStatusError as e:
        if e.status in NOT_AN_API:
            raise PreflightError(_not_an_api(url, e)) from None
        if e.status == 429 or e.status >= 500:
            pause = min(e.retry_after_s or RETRY_PAUSE_S, MAX_RETRY_AFTER_S)
            raise _Transient(_status_message(url, e, target), pause) from None
        raise PreflightError(_status_message(url, e, target)) from None
    except ConnectFailed as e:
        raise await unreachable(target, e) from None
    except PhaseTimeout as e:
        if e.phase in ("connect", "headers") or (e.phase == "deadline" and not kinds):
            raise await unreachable(target, e) from None
        raise _Transient(
            f"{url} did not answer a 2-token request in time ({e.phase}: {redact(e.detail)}): "
            "is the server overloaded or still loading the model?"
        ) from None
    except InBandError as e:
        raise _Transient(
            f"{url} streamed an error: {redact(e.detail)} (check target.model and the server)"
        ) from None
    except StreamTruncated as e:
        raise _Transient(
            f"{url} did not finish a streamed response ({redact(e.detail)}): is it an "
            "OpenAI-compatible streaming endpoint?"
        ) from None
    except StreamReset as e:
        raise _Transient(f"{url} dropped the connection mid-stream: {redact(e.detail)}") from None
    except StreamProtocolError as e:
        raise PreflightError(
            f"{url} is not streaming server-sent events: {redact(e.detail)}. Point "
            "target.base_url at the OpenAI-compatible API (usually ending in /v1)."
        ) from None
    except TransportError as e:
        raise PreflightError(f"{url}: {redact(e.detail)}") from None
    if EventKind.DONE not in kinds:
        raise PreflightError(f"{url} sent no [DONE]: is it an OpenAI-compatible server?")


# A web server that is not an API: it refuses the POST itself (python -m http.server: 501).
NOT_AN_API = frozenset({405, 501})
TLS_PROBE_S = 2.0


def _not_an_api(url: str, e: HttpStatusError) -> str:
    return (
        f"not an LLM API: a web server answered {e.status} to a POST at {url} "
        f"({redact(e.detail)}). Point target.base_url at the OpenAI-compatible API "
        "(usually ending in /v1)"
    )


async def reach(target: OpenAITarget) -> None:
    """Open one connection (TCP, and TLS for https) within target.connect_timeout_s: before
    the probe's checks, so an unreachable target is one clear PreflightError, not a timeout
    per check."""
    try:
        await target.warm(1)
    except (ConnectFailed, PhaseTimeout) as e:
        raise await unreachable(target, e) from None


async def unreachable(target: OpenAITarget, e: ConnectFailed | PhaseTimeout) -> PreflightError:
    """The error for a target that gave no answer, naming the real cause: refused (or DNS),
    no connection within the connect timeout, TLS to a port that speaks plain HTTP, or a
    connection accepted but never answered."""
    url, s = target.display_url, target.spec
    if isinstance(e, PhaseTimeout) and e.phase != "connect":
        return PreflightError(
            f"{url} accepted the connection but sent no response within "
            f"{min(s.deadline_s, PREFLIGHT_DEADLINE_S):g} s (target.deadline_s): is this "
            "port an HTTP server, and is it stuck?"
        )
    plain = await _plain_http_behind_tls(target)
    if plain:
        return PreflightError(f"{url}: {plain}")
    if isinstance(e, PhaseTimeout):
        return PreflightError(
            f"cannot reach {url}: no connection within {s.connect_timeout_s:g} s "
            "(target.connect_timeout_s; firewall, wrong host or port?)"
        )
    return PreflightError(
        f"cannot reach {url}: {redact(e.detail)}. Is the server running, and is "
        "target.base_url right (scheme, host, port)?"
    )


async def _plain_http_behind_tls(target: OpenAITarget) -> str | None:
    """For an https:// target whose connection failed: if its port answers plain HTTP, say
    so (the TCP connection worked; TLS was the problem). None when that is not the case."""
    parts = urlsplit(target.spec.base_url)
    if parts.scheme != "https" or not parts.hostname:
        return None
    port = parts.port or 443
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port), TLS_PROBE_S
        )
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"HEAD / HTTP/1.1\r\nHost: {parts.hostname}\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.read(16), TLS_PROBE_S)
    except (OSError, TimeoutError):
        head = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not head.startswith(b"HTTP/"):
        return None
    return (
        f"connected to {parts.hostname}:{port}, but the TLS handshake failed: that port "
        "speaks plain HTTP. Use http:// in target.base_url"
    )


def _status_message(url: str, e: HttpStatusError, target: OpenAITarget) -> str:
    detail = redact(e.detail)
    env = target.spec.api_key_env
    if e.status in (401, 403):
        fix = (
            f"check the key in ${env} (target.api_key_env)"
            if env
            else "the server wants an API key: set target.api_key_env to the variable holding it"
        )
        return f"{url} rejected the credentials ({detail}): {fix}"
    if e.status == 404:
        return (
            f"{url} does not exist ({detail}): target.base_url is probably wrong — it should be "
            "the API root, usually ending in /v1, and target.api must match the endpoint"
        )
    if 300 <= e.status < 400:
        return f"{url} redirects ({detail}); redirects are not followed: use the final URL"
    if e.status in (400, 422):
        return f"{url} refused the request ({detail}): check target.model ({target.spec.model!r})"
    if e.status == 429 or e.status >= 500:
        return f"{url} is not healthy ({detail}): try again when the server is ready"
    return f"{url} answered {detail}"
