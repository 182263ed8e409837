"""OpenAI's text-to-speech (`POST /audio/speech`): `model`, `input` (the workload's text),
`voice`, `response_format` (pcm, wav, mp3, opus, aac, flac) and `stream_format`. The answer is
the audio itself, streamed in the body's chunks (`stream_format = "audio"`, the default), or SSE
(`"sse"`): `speech.audio.delta` events whose `audio` is base64, then `speech.audio.done` with
`usage` (input/output/total tokens). Which form came back is read from the content type.

Each arrival of audio bytes is one CONTENT event (one chunk, `tokens` = 1): the runner stamps it
as it stamps tokens, so TTFT is the time to the first audio byte and ITL the gap between audio
chunks. At the end, the audio's decoded length (loadgen.targets.audio) rides on USAGE."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import AudioFacts, EventKind, PreparedRequest, StreamEvent, Usage
from loadgen.targets import audio
from loadgen.targets.apis.base import BY_TYPE, Decoder, SseApi, dumps, int_or_none, loads_object
from loadgen.targets.openai_stream import short

_DROP = ("max_tokens", "max_completion_tokens", "stream_options", "messages", "prompt", "stream")


class SpeechDecoder:
    """Audio chunks as CONTENT events; USAGE with the decoded duration and DONE at the end.

    `sse`: payloads are SSE event data (`speech.audio.delta` / `.done`); else every read of the
    body is audio. Compressed formats keep the body (their length needs a reader); PCM and WAV
    keep a count (and WAV its header)."""

    __slots__ = ("_head", "_keep", "_n", "_parts", "_usage", "done", "fmt", "sse")

    def __init__(self, fmt: str, sse: bool) -> None:
        self.done = False
        self.fmt = fmt
        self.sse = sse
        self._keep = audio.needs_body(fmt)
        self._parts: list[bytes] = []
        self._head = b""
        self._n = 0
        self._usage: Usage | None = None

    def _audio(self, data: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        if not data:
            return
        self._n += len(data)
        if self._keep:
            self._parts.append(data)
        elif self.fmt == "wav" and len(self._head) < 4096:
            self._head += data[: 4096 - len(self._head)]
        out.append(StreamEvent(EventKind.CONTENT, t_ns, "", 1))

    def decode(self, payload: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        if self.done:
            return
        if not self.sse:
            self._audio(payload, t_ns, out)
            return
        if payload == b"[DONE]":
            self._end(t_ns, out)
            return
        obj = loads_object(payload, t_ns)
        kind = obj.get("type")
        if kind == "speech.audio.delta":
            b64 = obj.get("audio", obj.get("delta"))
            if not isinstance(b64, str):
                raise StreamProtocolError("speech.audio.delta without base64 audio", t_ns=t_ns)
            try:
                data = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                msg = "speech.audio.delta audio is not base64"
                raise StreamProtocolError(msg, t_ns=t_ns) from None
            self._audio(data, t_ns, out)
        elif kind == "speech.audio.done":
            u = obj.get("usage")
            if isinstance(u, dict):  # audio tokens are not chunks: output stays the chunk count
                self._usage = Usage(prompt_tokens=int_or_none(u.get("input_tokens")))
            self._end(t_ns, out)
        elif kind == "error" or "error" in obj:
            err = obj.get("error", obj)
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise InBandError(f"in-band error: {short(str(msg))}", t_ns=t_ns)

    def facts(self) -> AudioFacts:
        if self._keep:
            ms = audio.duration_ms(b"".join(self._parts), self.fmt)
        elif self.fmt == "wav":
            ms = audio.wav_ms(self._head, self._n)
        else:
            ms = audio.pcm_ms(self._n)
        return AudioFacts(duration_ms=ms, audio_bytes=self._n)

    def _end(self, t_ns: int, out: list[StreamEvent]) -> None:
        u = self._usage or Usage()
        u.audio = self.facts()
        out.append(StreamEvent(EventKind.USAGE, t_ns, usage=u))
        self.done = True
        out.append(StreamEvent(EventKind.DONE, t_ns))

    def finish(self, t_ns: int, out: list[StreamEvent]) -> None:
        """Raw audio ends with the body; SSE without speech.audio.done is truncated."""
        if not self.sse:
            self._end(t_ns, out)


class OpenAISpeech(SseApi):
    name = "openai-speech"
    framing = BY_TYPE
    stream_types: tuple[str, ...] = ("audio/", "application/octet-stream", "text/event-stream")
    end_marker: bytes | None = b"speech.audio.done"

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/audio/speech"

    def models_path(self, spec: TargetSpec) -> str:
        return "/models"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src = request.body
        text = src.get("input")
        if not isinstance(text, str):
            text = str(src.get("prompt", ""))
        body: dict[str, Any] = {"model": spec.model, "input": text}
        body.update((k, v) for k, v in src.items() if k not in _DROP and k != "input")
        return dumps(body), True  # the answer is always a body of audio (or SSE) to stream

    def decoder(self) -> Decoder:
        return SpeechDecoder("mp3", sse=False)

    def typed_decoder(self, content_type: str, body: dict[str, Any]) -> tuple[str, Decoder]:
        fmt = str(body.get("response_format") or "mp3").lower()
        sse = content_type.lower().startswith("text/event-stream")
        return ("sse" if sse else "raw"), SpeechDecoder(fmt, sse)

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        raise StreamProtocolError("a speech answer is audio, not JSON", t_ns=t_ns)
