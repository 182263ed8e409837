"""The simulated engine's audio APIs, from OpenAI's documented wire formats: text to speech
(`/v1/audio/speech`: PCM or WAV audio streamed in the body's chunks, or SSE `speech.audio.delta`
events) and speech to text (`/v1/audio/transcriptions`: a multipart upload, answered with SSE
`transcript.text.delta` / `transcript.text.done` events or one JSON body).

A "token" of the engine is one audio chunk (`audio_chunk_ms` of audio) for speech, one word
for a transcript; speech lasts the input's words at `speech_words_per_s`, a transcript has the
upload's length times that many words. With `audio_rtf` set, each token is due that fraction of
its audio's length after the previous (in mode "fixed"), so a whole answer takes about
`ttft_ms + audio_rtf * audio length`. A raw audio stream cannot carry an error event: the
`error_event` fault ends it early (clean end, less audio), as a real server would.
"""

from __future__ import annotations

import base64
import json
import math
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from loadgen.sim import text
from loadgen.sim.config import SimConfig
from loadgen.targets import audio

SPEECH = "openai-speech"
TRANSCRIPTION = "openai-transcription"
APIS = (SPEECH, TRANSCRIPTION)
PATHS = {"/v1/audio/speech": SPEECH, "/v1/audio/transcriptions": TRANSCRIPTION}
SPOKEN = ("pcm", "wav")  # the formats the simulated voice speaks
_BYTES_PER_MS = audio.PCM_RATE * audio.PCM_WIDTH // 1000  # 48: 24 kHz 16-bit mono


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def speech_fields(body: dict[str, Any], cfg: SimConfig) -> dict[str, Any]:
    """stream, max_tokens (audio chunks), prompt_tokens (words) and the audio settings of a
    speech request; text.BadRequest for one OpenAI's API refuses (or the sim cannot speak)."""
    inp = body.get("input")
    if not isinstance(inp, str) or not inp.strip():
        raise text.BadRequest("'input' is required")
    if not isinstance(body.get("voice"), str):
        raise text.BadRequest("'voice' is required")
    fmt = body.get("response_format", "mp3")
    if fmt not in audio.SPEECH_FORMATS:
        raise text.BadRequest(f"'response_format' must be one of {', '.join(audio.SPEECH_FORMATS)}")
    if fmt not in SPOKEN:
        raise text.BadRequest(f"the simulated engine speaks {' and '.join(SPOKEN)} only")
    sf = body.get("stream_format", "audio")
    if sf not in ("audio", "sse"):
        raise text.BadRequest("'stream_format' must be 'audio' or 'sse'")
    words = len(inp.split())
    speech_ms = words / cfg.speech_words_per_s * 1000.0
    chunks = max(1, math.ceil(speech_ms / cfg.audio_chunk_ms))
    settings = {"format": fmt, "sse": sf == "sse", "chunk_ms": cfg.audio_chunk_ms,
                "words": words, "chunks": chunks}  # fmt: skip
    return {"stream": True, "max_tokens": chunks, "include_usage": True, "prompt_tokens": words,
            "audio": settings}  # fmt: skip


def transcription_fields(raw: bytes, content_type: str, cfg: SimConfig) -> dict[str, Any]:
    """stream, max_tokens (transcript words) and the audio settings of a multipart upload."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise text.BadRequest("expected multipart/form-data")
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
    )
    if not msg.is_multipart():
        raise text.BadRequest("malformed multipart body")
    fields: dict[str, str] = {}
    file: bytes | None = None
    name = ""
    for part in msg.iter_parts():
        key = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(key, str) or not isinstance(payload, bytes):
            continue
        if key == "file":
            file, name = payload, str(part.get_filename() or "")
        else:
            fields[key] = payload.decode("utf-8", "replace")
    if file is None:
        raise text.BadRequest("'file' is required")
    if "model" not in fields:
        raise text.BadRequest("'model' is required")
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else "wav"
    ms = audio.duration_ms(file, ext)
    if ms is None or ms <= 0:
        raise text.BadRequest(f"could not decode the audio file {name!r}")
    words = max(1, round(ms / 1000.0 * cfg.speech_words_per_s))
    fmt = fields.get("response_format", "json")
    if fmt not in ("json", "verbose_json"):
        raise text.BadRequest("'response_format' must be json or verbose_json")
    settings = {"duration_ms": ms, "words": words, "format": fmt, "sse": True}
    return {"stream": fields.get("stream", "false") == "true", "max_tokens": words,
            "include_usage": True, "prompt_tokens": 0, "audio": settings}  # fmt: skip


def token_interval_ns(api: str, settings: dict[str, Any], cfg: SimConfig) -> int:
    """Speed: ns between two tokens of this answer (0: the engine's own `itl_ms`)."""
    if cfg.audio_rtf <= 0 or not settings:
        return 0
    if api == SPEECH:
        per_token_ms = float(settings["chunk_ms"])
    else:
        per_token_ms = float(settings["duration_ms"]) / max(1, int(settings["words"]))
    return int(cfg.audio_rtf * per_token_ms * 1e6)


class _AudioBase:
    plain = False
    reports_timings = False
    content_pre = content_post = b""

    def __init__(self, request_id: str, model: str, settings: dict[str, Any]) -> None:
        self.request_id = request_id
        self.model = model
        self.s = settings

    def role_event(self) -> bytes:
        return b""

    def tool_open_event(self, name: str = "get_weather") -> bytes:
        return b""

    def done_event(self) -> bytes:
        return b""

    def body_headers(self, prompt: int, completion: int, elapsed_ms: float) -> dict[str, str]:
        return {}


class SpeechFormat(_AudioBase):
    """Silence, `chunk_ms` per token (a WAV opens with its header, sized for the whole answer)."""

    def __init__(self, request_id: str, model: str, settings: dict[str, Any]) -> None:
        super().__init__(request_id, model, settings)
        self.sse = bool(settings["sse"])
        wav = settings["format"] == "wav"
        self.stream_type = text.SSE_TYPE if self.sse else ("audio/wav" if wav else "audio/pcm")
        self.pcm = bytes(int(float(settings["chunk_ms"]) * _BYTES_PER_MS))
        self.first = wav

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        data = self.pcm
        if self.first:
            self.first = False
            data = audio.wav_header(len(self.pcm) * int(self.s["chunks"])) + data
        if not self.sse:
            return data
        b64 = base64.b64encode(data)
        return b'data: {"type":"speech.audio.delta","audio":"%s"}\n\n' % b64

    def tail(self, reason: str, prompt: int, generated: int, reasoning: int | None,
             include_usage: bool, timings: dict[str, Any] | None, done: bool,
             full_text: str) -> bytes:  # fmt: skip
        if not self.sse or not done:
            return b""
        usage = {"input_tokens": prompt, "output_tokens": generated,
                 "total_tokens": prompt + generated}  # fmt: skip
        return b"data: " + _dumps({"type": "speech.audio.done", "usage": usage}) + b"\n\n"

    def error(self, message: str) -> bytes:
        if not self.sse:
            return b""  # no channel for it in raw audio: the answer just ends early
        err = {"type": "error", "error": {"message": message, "type": "server_error"}}
        return b"data: " + _dumps(err) + b"\n\n"

    def body(self, text_out: str, reasoning: str | None, reasoning_field: str, prompt: int,
             completion: int, timings: dict[str, Any] | None) -> bytes:  # fmt: skip
        return _dumps({"error": {"message": "speech is always streamed"}})


class TranscriptionFormat(_AudioBase):
    stream_type = text.SSE_TYPE

    def _usage(self, prompt: int, generated: int) -> dict[str, Any]:
        seconds = round(float(self.s["duration_ms"]) / 1000.0, 3)
        return {"type": "tokens", "input_tokens": math.ceil(seconds * 10),
                "output_tokens": generated, "total_tokens": math.ceil(seconds * 10) + generated,
                "input_token_details": {"audio_tokens": math.ceil(seconds * 10)}}  # fmt: skip

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        return b'data: {"type":"transcript.text.delta","delta":"%s"}\n\n' % chunk

    def tail(self, reason: str, prompt: int, generated: int, reasoning: int | None,
             include_usage: bool, timings: dict[str, Any] | None, done: bool,
             full_text: str) -> bytes:  # fmt: skip
        if not done:
            return b""
        obj = {"type": "transcript.text.done", "text": full_text,
               "usage": self._usage(prompt, generated)}  # fmt: skip
        return b"data: " + _dumps(obj) + b"\n\n"

    def error(self, message: str) -> bytes:
        err = {"type": "error", "error": {"message": message, "type": "server_error"}}
        return b"data: " + _dumps(err) + b"\n\n"

    def body(self, text_out: str, reasoning: str | None, reasoning_field: str, prompt: int,
             completion: int, timings: dict[str, Any] | None) -> bytes:  # fmt: skip
        return _dumps({"text": text_out, "usage": self._usage(prompt, completion)})


_REFUSED = {"sse": True, "format": "pcm", "chunk_ms": 100.0, "chunks": 1, "duration_ms": 1.0,
            "words": 1}  # fmt: skip


def make_format(api: str, request_id: str, model: str, settings: dict[str, Any]) -> Any:
    """The stream/body writer of an audio answer (loadgen.sim.formats.Format's shape); a
    refused request (no settings) gets one too, never used to write audio."""
    settings = settings or _REFUSED
    if api == SPEECH:
        return SpeechFormat(request_id, model, settings)
    return TranscriptionFormat(request_id, model, settings)
