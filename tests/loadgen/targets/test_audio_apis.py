"""The speech APIs' wire formats, from OpenAI's documented shapes (no server can run here from
packages, see README "Speech out"): the audio's length decoded from its bytes (PCM, WAV with a
streaming placeholder size, MP3 frames read by mutagen), speech answered raw or as SSE
`speech.audio.delta` events split anywhere, a transcription's multipart upload (parsed back by
the standard library's MIME parser) and its SSE and JSON answers, and in-band errors."""

from __future__ import annotations

import base64
import json
import struct
from email.parser import BytesParser
from email.policy import HTTP

import pytest

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets import audio
from loadgen.targets.apis import api_for
from loadgen.targets.apis.speech import SpeechDecoder
from loadgen.targets.apis.transcription import BOUNDARY, TranscriptionDecoder
from loadgen.targets.framing import RawParser
from loadgen.targets.sse import SSEParser


def _mp3_cbr(frames: int) -> bytes:
    """MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, mono, no CRC: `frames` frames of 417 bytes
    (1152 samples each), payload zero."""
    header = struct.pack(">I", 0xFFFB90C4)  # sync, MPEG1, L3, 128k, 44100, no pad, mono
    return (header + bytes(417 - 4)) * frames


def test_lengths_come_from_the_decoded_audio_not_the_byte_count() -> None:
    one_s = bytes(audio.PCM_RATE * audio.PCM_WIDTH)
    assert audio.duration_ms(one_s, "pcm") == pytest.approx(1000.0)
    assert audio.duration_ms(one_s[:-1], "pcm") == pytest.approx(1000.0 - 1000 / 24000)
    wav = audio.wav_bytes(one_s, rate=16_000)  # 16 kHz: the same bytes are 1.5 s
    assert audio.duration_ms(wav, "wav") == pytest.approx(1500.0)
    streamed = bytearray(wav)  # a streamed WAV: sizes are placeholders, the bytes tell
    streamed[40:44] = b"\xff\xff\xff\xff"
    assert audio.wav_ms(bytes(streamed)) == pytest.approx(1500.0)
    assert audio.wav_ms(bytes(streamed[:44]), total_bytes=44 + 16_000) == pytest.approx(500.0)
    mp3 = _mp3_cbr(383)  # 383 * 1152 / 44100 = 10.005 s
    assert audio.duration_ms(mp3, "mp3") == pytest.approx(383 * 1152 / 44.1, rel=0.01)
    assert audio.duration_ms(b"not audio at all", "mp3") is None
    assert audio.duration_ms(b"RIFF", "wav") is None


def _decode(
    dec: SpeechDecoder, parser: SSEParser | RawParser, reads: list[bytes]
) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for t, data in enumerate(reads):
        for payload in parser.feed(data):
            dec.decode(payload, t, out)
    if not dec.done:
        dec.finish(len(reads), out)
    return out


def test_raw_speech_is_one_chunk_per_read_and_its_length_at_the_end() -> None:
    pcm = bytes(48_000)  # 1 s at 24 kHz 16-bit
    reads = [pcm[:1000], pcm[1000:30_001], pcm[30_001:]]
    api = api_for("openai-speech")
    framing, dec = api.typed_decoder("audio/pcm", {"response_format": "pcm"})  # type: ignore[attr-defined]
    assert framing == "raw"
    evs = _decode(dec, RawParser(), reads)
    assert [e.kind for e in evs] == [EventKind.CONTENT] * 3 + [EventKind.USAGE, EventKind.DONE]
    assert [e.t_ns for e in evs[:3]] == [0, 1, 2]
    facts = evs[3].usage.audio  # type: ignore[union-attr]
    assert facts is not None and facts.audio_bytes == 48_000
    assert facts.duration_ms == pytest.approx(1000.0)
    wav = audio.wav_bytes(pcm)
    framing, dec = api.typed_decoder("audio/wav", {"response_format": "wav"})  # type: ignore[attr-defined]
    evs = _decode(dec, RawParser(), [wav[:10], wav[10:5000], wav[5000:]])
    assert evs[-2].usage.audio.duration_ms == pytest.approx(1000.0)  # type: ignore[union-attr]


def test_sse_speech_deltas_are_base64_split_anywhere_and_end_with_done() -> None:
    pcm = bytes(range(256)) * 90  # 23,040 bytes = 480 ms
    parts = [pcm[:10_000], pcm[10_000:]]
    events = b"".join(
        b"data: "
        + json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(p).decode()}).encode()
        + b"\n\n"
        for p in parts
    )
    usage = {"input_tokens": 4, "output_tokens": 60, "total_tokens": 64}
    events += (
        b"data: " + json.dumps({"type": "speech.audio.done", "usage": usage}).encode() + b"\n\n"
    )
    reads = [events[i : i + 777] for i in range(0, len(events), 777)]
    api = api_for("openai-speech")
    framing, dec = api.typed_decoder("text/event-stream", {"response_format": "pcm"})  # type: ignore[attr-defined]
    assert framing == "sse"
    evs = _decode(dec, SSEParser(), reads)
    content = [e for e in evs if e.kind is EventKind.CONTENT]
    assert len(content) == 2 and evs[-1].kind is EventKind.DONE
    u = evs[-2].usage
    assert u is not None and u.prompt_tokens == 4 and u.completion_tokens is None
    assert u.audio is not None and u.audio.audio_bytes == len(pcm)
    assert u.audio.duration_ms == pytest.approx(480.0)


def test_speech_errors_and_bad_audio_fail_the_request() -> None:
    dec = SpeechDecoder("pcm", sse=True)
    with pytest.raises(InBandError, match="overloaded"):
        dec.decode(b'{"type":"error","error":{"message":"overloaded"}}', 5, [])
    with pytest.raises(StreamProtocolError, match="base64"):
        dec.decode(b'{"type":"speech.audio.delta","audio":"!!!"}', 5, [])
    out: list[StreamEvent] = []
    dec.finish(9, out)  # SSE without speech.audio.done: truncated (the target says so)
    assert out == [] and not dec.done


def test_speech_body_sends_input_voice_and_formats() -> None:
    spec = TargetSpec(api="openai-speech", base_url="http://127.0.0.1:1/v1", model="tts-1")
    body = {"input": "hello there", "voice": "nova", "response_format": "wav", "max_tokens": 9}
    data, streaming = api_for("openai-speech").encode(spec, PreparedRequest("r", body))
    assert streaming and json.loads(data) == {
        "model": "tts-1",
        "input": "hello there",
        "voice": "nova",
        "response_format": "wav",
    }


def _parse_multipart(data: bytes, content_type: str) -> dict[str, tuple[bytes, str | None]]:
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + data
    )
    out = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        out[str(name)] = (part.get_payload(decode=True), part.get_filename())
    return out


def test_transcription_uploads_multipart_form_data() -> None:
    api = api_for("openai-transcription")
    assert api.content_type == f"multipart/form-data; boundary={BOUNDARY}"
    spec = TargetSpec(
        api="openai-transcription", base_url="http://127.0.0.1:1/v1", model="whisper-1"
    )
    clip = audio.wav_bytes(bytes(range(256)) * 40)
    body = {"file": clip, "filename": "a.wav", "file_type": "audio/wav", "language": "en",
            "response_format": "json", "include": ["logprobs"]}  # fmt: skip
    data, streaming = api.encode(spec, PreparedRequest("r", body))
    assert streaming  # the spec's stream = true
    parts = _parse_multipart(data, api.content_type)
    assert parts["file"] == (clip, "a.wav")
    assert parts["model"][0] == b"whisper-1" and parts["stream"][0] == b"true"
    assert parts["language"][0] == b"en" and parts["include[]"][0] == b"logprobs"
    assert "filename" not in parts and "file_type" not in parts


def test_transcription_sse_and_json_answers() -> None:
    deltas = ["The", " quick", " brown fox"]
    stream = b"".join(
        b"data: " + json.dumps({"type": "transcript.text.delta", "delta": d}).encode() + b"\n\n"
        for d in deltas
    )
    usage = {"type": "tokens", "input_tokens": 14, "output_tokens": 5, "total_tokens": 19,
             "input_token_details": {"text_tokens": 0, "audio_tokens": 14}}  # fmt: skip
    done = {"type": "transcript.text.done", "text": "The quick brown fox", "usage": usage}
    stream += b"data: " + json.dumps(done).encode() + b"\n\n"
    parser, dec, out = SSEParser(), TranscriptionDecoder(), []  # type: ignore[var-annotated]
    for i in range(0, len(stream), 50):
        for payload in parser.feed(stream[i : i + 50]):
            dec.decode(payload, i, out)
    assert [e.text for e in out if e.kind is EventKind.CONTENT] == deltas
    u = out[-2].usage
    assert u.prompt_tokens == 14 and u.completion_tokens == 5 and u.audio.words == 4
    assert out[-1].kind is EventKind.DONE and dec.done
    body = json.dumps({"text": "hello world", "usage": {"type": "duration", "seconds": 3}})
    evs = api_for("openai-transcription").decode_body(body.encode(), 7)
    assert [e.kind for e in evs] == [EventKind.CONTENT, EventKind.USAGE, EventKind.DONE]
    assert evs[1].usage is not None and evs[1].usage.completion_tokens is None
    assert evs[1].usage.audio is not None and evs[1].usage.audio.words == 2
    with pytest.raises(InBandError, match="bad file"):
        api_for("openai-transcription").decode_body(b'{"error":{"message":"bad file"}}', 1)
