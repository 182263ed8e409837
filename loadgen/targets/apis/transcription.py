"""OpenAI's speech-to-text (`POST /audio/transcriptions`): a multipart/form-data upload of the
workload's audio (`file`) with `model`, `stream` and the workload's other fields (`language`,
`response_format`, ...). Streamed (`stream = true`): SSE `transcript.text.delta` events (each a
CONTENT delta) and `transcript.text.done` with the whole `text` and `usage`; not streamed: one
JSON body with `text` (and `usage`). Usage is `{type: "tokens", input_tokens, output_tokens}`
(gpt-4o-transcribe) or `{type: "duration", seconds}` (whisper-1): tokens are taken, a duration
is the server's, not the measure (the upload's own length is known). The transcript's words
ride on USAGE."""

from __future__ import annotations

from typing import Any

from loadgen.errors import InBandError, SpecError, StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import AudioFacts, EventKind, PreparedRequest, StreamEvent, Usage
from loadgen.targets.apis.base import (
    JsonEventDecoder,
    SseApi,
    body_streaming,
    int_or_none,
    loads_object,
)
from loadgen.targets.openai_stream import short

BOUNDARY = "peakload-audio-7d1c0f3e9b2a4c58"
"""The multipart boundary (fixed: the request's content type is set once per target); an upload
holding it is refused."""
FILE_FIELDS = ("file", "filename", "file_type")  # the workload's audio: bytes, name, type
_DROP = (*FILE_FIELDS, "max_tokens", "max_completion_tokens", "stream_options", "messages",
         "prompt", "model", "stream")  # fmt: skip


def _usage(u: Any, text: str | None) -> Usage:
    usage = Usage()
    if isinstance(u, dict) and u.get("type", "tokens") == "tokens":
        usage.prompt_tokens = int_or_none(u.get("input_tokens"))
        usage.completion_tokens = int_or_none(u.get("output_tokens"))
    usage.audio = AudioFacts(words=len(text.split()) if isinstance(text, str) else None)
    return usage


def _error(obj: dict[str, Any]) -> str:
    err = obj.get("error", obj)
    msg = err.get("message", err) if isinstance(err, dict) else err
    return short(str(msg))


def multipart(fields: list[tuple[str, str]], file: bytes, filename: str, ftype: str) -> bytes:
    """A multipart/form-data body (RFC 7578) of text `fields` and one `file` part."""
    if BOUNDARY.encode() in file:
        raise SpecError(f"{filename}: the audio holds the multipart boundary", "workload.audio")
    b = BOUNDARY.encode()
    parts: list[bytes] = []
    for name, value in fields:
        parts.append(
            b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
            % (b, name.encode(), value.encode())
        )
    safe = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
    parts.append(
        b'--%s\r\nContent-Disposition: form-data; name="file"; filename="%s"\r\n'
        b"Content-Type: %s\r\n\r\n" % (b, safe.encode(), ftype.encode())
    )
    parts.append(file)
    parts.append(b"\r\n--%s--\r\n" % b)
    return b"".join(parts)


class TranscriptionDecoder(JsonEventDecoder):
    """Ends at transcript.text.done (with the usage and text) or [DONE]."""

    __slots__ = ()

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        kind = obj.get("type")
        if kind == "transcript.text.delta":
            delta = obj.get("delta")
            if not isinstance(delta, str):
                raise StreamProtocolError(f"{kind} without a string delta", t_ns=t_ns)
            if delta:
                out.append(StreamEvent(EventKind.CONTENT, t_ns, delta, 1))
        elif kind == "transcript.text.done":
            self.end(t_ns, out, _usage(obj.get("usage"), obj.get("text")))
        elif kind == "error" or "error" in obj:
            raise InBandError(f"in-band error: {_error(obj)}", t_ns=t_ns)


class OpenAITranscription(SseApi):
    name = "openai-transcription"
    content_type = f"multipart/form-data; boundary={BOUNDARY}"
    end_marker: bytes | None = b"transcript.text.done"

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/audio/transcriptions"

    def models_path(self, spec: TargetSpec) -> str:
        return "/models"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        file = src.get("file")
        if not isinstance(file, bytes):
            raise SpecError("a transcription request needs audio (workload.audio)", "workload")
        fields = [("model", spec.model), ("stream", "true" if streaming else "false")]
        for k, v in src.items():
            if k in _DROP or v is None:
                continue
            if isinstance(v, list):  # include[]=logprobs, timestamp_granularities[]=word
                fields.extend((f"{k}[]", str(x)) for x in v)
            else:
                fields.append((k, str(v).lower() if isinstance(v, bool) else str(v)))
        name = str(src.get("filename") or "audio.wav")
        ftype = str(src.get("file_type") or "application/octet-stream")
        return multipart(fields, file, name, ftype), streaming

    def decoder(self) -> TranscriptionDecoder:
        return TranscriptionDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        obj = loads_object(body, t_ns)
        if obj.get("error"):
            raise InBandError(f"error body: {_error(obj)}", t_ns=t_ns)
        text = obj.get("text")
        if not isinstance(text, str):
            raise StreamProtocolError("transcription body has no text", t_ns=t_ns)
        out: list[StreamEvent] = []
        if text:
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
        out.append(StreamEvent(EventKind.USAGE, t_ns, usage=_usage(obj.get("usage"), text)))
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out
