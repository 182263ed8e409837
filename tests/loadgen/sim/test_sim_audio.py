"""The simulated engine's speech routes as peakload's own target sees them (real sockets on
loopback): speech raw (PCM, WAV) and SSE, transcription streamed and not, the answer's pace set
by the real-time factor, one slot serving one speech at a time, and the text APIs' faults (503,
reset, in-band error) on audio."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from loadgen.errors import HttpStatusError, InBandError, TransportError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets import audio
from loadgen.targets.openai import OpenAITarget
from tests.support.sim import SimProcess, start_sim

TTFT_MS, RTF, CHUNK_MS = 30.0, 0.2, 100.0
ARGS = ["--preset", "fixed", "--ttft-ms", str(TTFT_MS), "--audio-rtf", str(RTF),
        "--audio-chunk-ms", str(CHUNK_MS), "--speech-words-per-s", "2.5"]  # fmt: skip
WORDS = "one two three four five six seven eight nine ten"  # 10 words: 4 s, 40 chunks


@pytest.fixture(scope="module")
def audio_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_sim(ARGS, tmp_path_factory.mktemp("audio")) as sp:
        yield sp


def _send(
    sp: SimProcess, api: str, body: dict[str, object], *, stream: bool = True, fault: str = ""
) -> tuple[list[StreamEvent], Exception | None]:
    spec = TargetSpec(api=api, base_url=sp.base_url, model="m", stream=stream)  # type: ignore[arg-type]
    headers = {"x-peakload-sim-fault": fault} if fault else {}

    async def go() -> tuple[list[StreamEvent], Exception | None]:
        target = OpenAITarget(spec, max_connections=1)
        out: list[StreamEvent] = []
        try:
            req = PreparedRequest("r-audio", body, deadline_s=30, headers=headers)
            async for ev in target.stream(req, time.perf_counter_ns):
                out.append(ev)
        except TransportError as e:
            return out, e
        finally:
            await target.aclose()
        return out, None

    return asyncio.run(go())


def _facts(evs: list[StreamEvent]) -> tuple[int, float | None]:
    usage = [e.usage for e in evs if e.kind is EventKind.USAGE and e.usage is not None]
    assert usage and usage[-1].audio is not None
    return len([e for e in evs if e.kind is EventKind.CONTENT]), usage[-1].audio.duration_ms


@pytest.mark.parametrize("fmt, sse", [("pcm", False), ("wav", False), ("pcm", True), ("wav", True)])
def test_speech_streams_its_audio_at_the_real_time_factor(
    audio_sim: SimProcess, fmt: str, sse: bool
) -> None:
    body: dict[str, object] = {"input": WORDS, "voice": "alloy", "response_format": fmt}
    if sse:
        body["stream_format"] = "sse"
    evs, err = _send(audio_sim, "openai-speech", body)
    assert err is None and evs[-1].kind is EventKind.DONE
    chunks, ms = _facts(evs)
    assert ms == pytest.approx(4000.0)  # 10 words at 2.5 words/s, decoded from the bytes
    assert chunks >= 2  # reads may merge chunks on a slow host; never fewer bytes
    sent = next(e.t_ns for e in evs if e.kind is EventKind.SENT)
    first = next(e.t_ns for e in evs if e.kind is EventKind.CONTENT)
    e2e_ms = (evs[-1].t_ns - sent) / 1e6
    assert (first - sent) / 1e6 >= TTFT_MS - 0.5
    # the 40th chunk is due 30 + 39 x 20 ms after arrival: a floor that any host honours
    assert e2e_ms >= TTFT_MS + 39 * RTF * CHUNK_MS - 1.0


def test_transcription_streamed_and_whole(audio_sim: SimProcess) -> None:
    clip = audio.wav_bytes(bytes(48_000 * 2))  # 2 s of silence: 5 words at 2.5 words/s
    body = {"file": clip, "filename": "c.wav", "file_type": "audio/wav", "response_format": "json"}
    evs, err = _send(audio_sim, "openai-transcription", body)
    assert err is None
    words = [e.text for e in evs if e.kind is EventKind.CONTENT]
    usage = [e.usage for e in evs if e.kind is EventKind.USAGE][-1]
    assert len(words) == 5 and usage is not None and usage.audio is not None
    assert usage.audio.words == len("".join(words).split()) == 5
    assert usage.completion_tokens == 5
    sent = next(e.t_ns for e in evs if e.kind is EventKind.SENT)
    assert (evs[-1].t_ns - sent) / 1e6 >= TTFT_MS + 4 * RTF * 400 - 1.0  # 400 ms per word
    evs, err = _send(audio_sim, "openai-transcription", body, stream=False)
    assert err is None
    kinds = [e.kind for e in evs if e.kind not in (EventKind.SENT, EventKind.HEADERS)]
    assert kinds == [EventKind.CONTENT, EventKind.USAGE, EventKind.DONE]


def test_the_text_faults_apply_to_audio(audio_sim: SimProcess) -> None:
    speech = {"input": WORDS, "voice": "alloy", "response_format": "pcm"}
    evs, err = _send(audio_sim, "openai-speech", speech, fault="http_503")
    assert isinstance(err, HttpStatusError) and err.status == 503
    evs, err = _send(audio_sim, "openai-speech", speech, fault="reset:3")
    assert err is not None and not isinstance(err, HttpStatusError)
    got = sum(1 for e in evs if e.kind is EventKind.CONTENT)
    assert 1 <= got <= 3  # the audio before the reset is kept (reads may merge)
    sse = {**speech, "stream_format": "sse"}
    evs, err = _send(audio_sim, "openai-speech", sse, fault="error_event:2")
    assert isinstance(err, InBandError)
    clip = audio.wav_bytes(bytes(48_000 * 2))
    stt = {"file": clip, "filename": "c.wav", "file_type": "audio/wav"}
    evs, err = _send(audio_sim, "openai-transcription", stt, fault="error_event:2")
    assert isinstance(err, InBandError)
    assert [e.text for e in evs if e.kind is EventKind.CONTENT][:1]  # the words before it kept


def test_refused_speech_requests(audio_sim: SimProcess) -> None:
    _, err = _send(audio_sim, "openai-speech", {"input": WORDS, "response_format": "pcm"})
    assert isinstance(err, HttpStatusError) and err.status == 400 and "voice" in err.detail
    body = {"input": WORDS, "voice": "a", "response_format": "mp3"}
    _, err = _send(audio_sim, "openai-speech", body)
    assert isinstance(err, HttpStatusError) and "pcm and wav" in err.detail


def test_one_slot_serves_one_speech_at_a_time() -> None:
    """Batching mode, one slot: of two speeches sent together, the second starts streaming only
    once the first has ended (the engine's slots apply to audio as to text)."""
    speech = {"input": WORDS, "voice": "alloy", "response_format": "pcm"}
    with start_sim(["--preset", "small-gpu", "--slots", "1"]) as sp:
        spec = TargetSpec(api="openai-speech", base_url=sp.base_url, model="m")

        async def one(rid: str) -> tuple[int, int]:
            target = OpenAITarget(spec, max_connections=1)
            try:
                req = PreparedRequest(rid, speech, deadline_s=30)
                stamps = [
                    e.t_ns
                    async for e in target.stream(req, time.perf_counter_ns)
                    if e.kind in (EventKind.CONTENT, EventKind.DONE)
                ]
            finally:
                await target.aclose()
            return stamps[0], stamps[-1]

        async def both() -> list[tuple[int, int]]:
            return list(await asyncio.gather(one("a"), one("b")))

        (_a0, a1), (b0, _b1) = sorted(asyncio.run(both()))
    assert b0 >= a1 - 2_000_000  # the second's first chunk after the first's end (2 ms slack)
