"""The audio a speech-in (transcription) workload sends: the files of a folder, or clips spoken
offline by espeak-ng (Debian package `espeak-ng`) from seeded words at about the lengths asked.
Each clip's length is read from its own bytes (loadgen.targets.audio), so it is known exactly
whichever way it was made. Nothing is downloaded.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from loadgen.errors import SpecError
from loadgen.runspec.workload_spec import DEFAULT_SPEAK_SECONDS, AudioSpec
from loadgen.targets import audio

MAX_FILE_BYTES = 25 * 1024 * 1024  # OpenAI's and Groq's upload limit
ESPEAK = "espeak-ng"
_EXTENSIONS = tuple(f".{e}" for e in audio.CONTENT_TYPES)


@dataclass(frozen=True, slots=True)
class AudioClip:
    """One upload: its bytes, file name, content type, decoded length (ms; None if its format
    does not say) and the words it speaks (espeak clips; None for files)."""

    name: str
    data: bytes
    content_type: str
    duration_ms: float | None
    words: int | None = None


def load_clips(spec: AudioSpec | None, seed: int, vocab: tuple[str, ...]) -> list[AudioClip]:
    """The workload's clips, in the order requests take them (request i sends clip i mod n)."""
    if spec is not None and spec.files is not None:
        return folder_clips(Path(spec.files))
    seconds = tuple(spec.speak_seconds) if spec and spec.speak_seconds else DEFAULT_SPEAK_SECONDS
    wpm = spec.speak_wpm if spec is not None else 175
    return [spoken_clip(s, wpm, seed, i, vocab) for i, s in enumerate(seconds)]


def folder_clips(folder: Path) -> list[AudioClip]:
    where = "workload.audio.files"
    if not folder.is_dir():
        raise SpecError(f"{folder} is not a folder", where)
    out: list[AudioClip] = []
    for p in sorted(folder.iterdir()):
        if not p.is_file() or p.suffix.lower() not in _EXTENSIONS:
            continue
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecError(f"{p.name} is {size} bytes, over the 25 MB upload limit", where)
        data = p.read_bytes()
        ext = p.suffix.lower().lstrip(".")
        ms = audio.duration_ms(data, ext)
        out.append(AudioClip(p.name, data, audio.CONTENT_TYPES[ext], ms))
    if not out:
        known = ", ".join(_EXTENSIONS)
        raise SpecError(f"{folder} holds no audio file ({known})", where)
    return out


def spoken_clip(
    seconds: float, wpm: int, seed: int, index: int, vocab: tuple[str, ...]
) -> AudioClip:
    """A WAV of seeded words spoken by espeak-ng at `wpm`, as many as bring it within 5 % of
    `seconds` or half a second, whichever is more (a word's length bounds short clips; up to two
    corrections of the count); its true length, read from the WAV, is what is recorded."""
    n = max(1, round(seconds * wpm / 60.0))
    pool = np.random.default_rng([seed, 0xA0D10, index]).integers(0, len(vocab), size=4 * n + 8)
    for _ in range(3):  # espeak-ng's pace varies with the words: correct the count, twice
        words = " ".join(vocab[int(i)] for i in pool[:n])
        data = _speak(words, wpm)
        ms = audio.wav_ms(data)
        if ms is None or abs(ms - seconds * 1000) <= _tolerance_ms(seconds):
            break
        n = max(1, min(len(pool), round(n * seconds * 1000 / max(ms, 1.0))))
    return AudioClip(f"speech-{index}.wav", data, "audio/wav", ms, n)


def _tolerance_ms(seconds: float) -> float:
    return max(0.05 * seconds * 1000, 500.0)


@cache
def _speak(text: str, wpm: int) -> bytes:
    exe = shutil.which(ESPEAK)
    if exe is None:
        raise SpecError(
            "espeak-ng is not installed (apt-get install -y espeak-ng), and no audio "
            "files were given (workload.audio.files)",
            "workload.audio",
        )
    try:
        done = subprocess.run(  # a fixed executable; the text is one argument, after "--"
            [exe, "-s", str(wpm), "--stdout", "--", text],
            capture_output=True,
            timeout=120,
            check=True,
        )
    except (subprocess.SubprocessError, OSError) as e:
        raise SpecError(f"espeak-ng failed: {e}", "workload.audio") from None
    return _fix_sizes(done.stdout)


def _fix_sizes(wav: bytes) -> bytes:
    """espeak-ng writing to a pipe cannot seek back: its RIFF and data sizes are placeholders.
    Put the real ones in, so any reader (and any server) sees the clip's true length."""
    layout = audio.wav_layout(wav)
    if layout is None:
        raise SpecError("espeak-ng did not write a WAV", "workload.audio")
    start = layout[2]
    fixed = bytearray(wav)
    fixed[4:8] = (len(wav) - 8).to_bytes(4, "little")
    fixed[start - 4 : start] = (len(wav) - start).to_bytes(4, "little")
    return bytes(fixed)
