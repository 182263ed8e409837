"""Speech workloads: clips spoken by espeak-ng at about the lengths asked (their exact length
read back from the WAV), clips from a folder in name order, the bodies each API is sent, and the
spec's refusals (audio settings on a text API, two audio sources, absurd lengths)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from loadgen.engine.audioclips import folder_clips, load_clips
from loadgen.engine.workload import Workload, request_body
from loadgen.errors import SpecError
from loadgen.runspec.spec import spec_from_dict
from loadgen.runspec.workload_spec import AudioSpec
from loadgen.targets import audio

VOCAB = ("alpha", "bravo", "charlie", "delta", "echo")


def _spec(api: str, workload: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "s",
        "target": {"api": api, "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "workload": workload,
        "load": {"concurrency": [1], "duration_s": 1},
    }


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_spoken_clips_last_about_as_long_as_asked_and_repeat_exactly() -> None:
    spec = AudioSpec(speak_seconds=[2, 8])
    clips = load_clips(spec, seed=3, vocab=VOCAB)
    assert [c.name for c in clips] == ["speech-0.wav", "speech-1.wav"]
    for clip, asked in zip(clips, (2000, 8000), strict=True):
        assert clip.duration_ms is not None
        assert abs(clip.duration_ms - asked) <= max(0.05 * asked, 500)
        assert clip.duration_ms == audio.wav_ms(clip.data)  # the WAV's own sizes are right
        assert clip.content_type == "audio/wav" and clip.words and clip.words >= 1
    again = load_clips(spec, seed=3, vocab=VOCAB)
    assert [c.data for c in again] == [c.data for c in clips]


def test_folder_clips_in_name_order_with_their_lengths(tmp_path: Path) -> None:
    (tmp_path / "b.wav").write_bytes(audio.wav_bytes(bytes(48_000)))
    (tmp_path / "a.wav").write_bytes(audio.wav_bytes(bytes(24_000), rate=16_000))
    (tmp_path / "notes.txt").write_text("not audio")
    clips = folder_clips(tmp_path)
    assert [(c.name, c.duration_ms) for c in clips] == [("a.wav", 750.0), ("b.wav", 1000.0)]
    with pytest.raises(SpecError, match="holds no audio file"):
        folder_clips(_empty(tmp_path))
    with pytest.raises(SpecError, match="is not a folder"):
        folder_clips(tmp_path / "missing")


def _empty(tmp_path: Path) -> Path:
    p = tmp_path / "empty"
    p.mkdir()
    return p


def test_each_api_gets_its_body(tmp_path: Path) -> None:
    (tmp_path / "one.wav").write_bytes(audio.wav_bytes(bytes(4_800)))
    stt = spec_from_dict(
        _spec("openai-transcription", {"audio": {"files": str(tmp_path), "language": "de"}})
    )
    p = Workload(stt, shard_seed=1).prompt(5)
    assert p.audio is not None and p.audio.name == "one.wav"
    body = request_body(stt, p)
    assert body == {"file": p.audio.data, "filename": "one.wav", "file_type": "audio/wav",
                    "language": "de", "response_format": "json"}  # fmt: skip
    tts = spec_from_dict(
        _spec(
            "openai-speech",
            {"prompt_tokens": 7, "audio": {"format": "wav", "stream_format": "sse"}},
        )
    )
    body = request_body(tts, Workload(tts, shard_seed=1).prompt(0))
    assert len(body["input"].split()) == 7 and body["voice"] == "alloy"
    assert body["response_format"] == "wav" and body["stream_format"] == "sse"
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    "api, workload, why",
    [
        ("openai-chat", {"audio": {"voice": "a"}}, "is for openai-speech or"),
        ("openai-transcription", {"audio": {"files": "x", "speak_seconds": [1]}}, "not both"),
        ("openai-transcription", {"audio": {"speak_seconds": [0.1]}}, "0.5 to 600 seconds"),
        ("openai-transcription", {"dataset": "d.jsonl"}, "not a dataset"),
        ("openai-transcription", {"audio": {"files": "/no/such/dir"}}, "is not a folder"),
        ("openai-speech", {"sessions": {"turns": 2}}, "neither multi-turn"),
    ],
)
def test_the_spec_refuses_what_cannot_apply(api: str, workload: dict[str, Any], why: str) -> None:
    with pytest.raises(SpecError, match=why):
        spec_from_dict(_spec(api, workload))
