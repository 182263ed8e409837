"""Audio length from the bytes themselves (the decoded duration, never the byte count alone):
PCM from its sample rate, width and channels; WAV from its `fmt ` chunk and the bytes of its
`data` chunk that arrived (a streamed WAV's declared size is often a placeholder); MP3, Opus,
FLAC, AAC and Ogg through mutagen's readers (MP3: the Xing/VBRI frame count when the encoder
wrote one, else the bitrate and the byte count, exact for constant bitrate; Opus/Ogg: the last
page's granule position; FLAC: the STREAMINFO sample count). None when the bytes do not say.
"""

from __future__ import annotations

import io
import struct

SPEECH_FORMATS = ("pcm", "wav", "mp3", "opus", "aac", "flac")
"""The response formats of OpenAI's `/audio/speech` (`response_format`)."""
PCM_RATE = 24_000  # OpenAI's `pcm`: 24 kHz, 16-bit signed little-endian, mono
PCM_WIDTH = 2
PCM_CHANNELS = 1
CONTENT_TYPES = {
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "m4a": "audio/mp4",
    "webm": "audio/webm",
}
"""The upload's content type by file extension (transcription's multipart `file`)."""
_COMPRESSED = frozenset(("mp3", "opus", "aac", "flac", "ogg", "m4a", "webm"))


def pcm_ms(n_bytes: int, rate: int = PCM_RATE, width: int = PCM_WIDTH, channels: int = 1) -> float:
    """Duration (ms) of `n_bytes` of raw PCM: whole frames / rate."""
    frame = width * channels
    return (n_bytes // frame) * 1000.0 / rate


def wav_layout(data: bytes) -> tuple[int, int, int, int] | None:
    """(sample rate, block align, offset of the first data byte, declared data size) of a
    RIFF/WAVE header at the start of `data`, None when it is not one (or not all there yet)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, rate, block = 12, 0, 0
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if cid == b"fmt " and body + 16 <= len(data):
            _, _channels, rate, _byte_rate, block = struct.unpack_from("<HHIIH", data, body)
        elif cid == b"data":
            return (rate, block, body, size) if rate and block else None
        pos = body + size + (size & 1)
    return None


def wav_ms(data: bytes, total_bytes: int | None = None) -> float | None:
    """Duration (ms) of a RIFF/WAVE body (`total_bytes` of it, when only its head is at hand):
    the `data` bytes present, bounded by the declared size unless that is a streaming
    placeholder, over the `fmt ` chunk's rate and block size."""
    layout = wav_layout(data)
    if layout is None:
        return None
    rate, block, start, size = layout
    have = (len(data) if total_bytes is None else total_bytes) - start
    if size not in (0, 0xFFFFFFFF, 0x7FFFFFFF) and size < have:
        have = size
    return (max(have, 0) // block) * 1000.0 / rate


def compressed_ms(data: bytes) -> float | None:
    """Duration (ms) of an MP3/Opus/Ogg/FLAC/AAC/M4A body by mutagen, None if unreadable."""
    try:
        import mutagen
    except ImportError:  # pragma: no cover - a dependency of peakload
        return None
    try:
        f = mutagen.File(io.BytesIO(data))
    except Exception:  # mutagen raises many kinds for a bad file
        return None
    length = getattr(getattr(f, "info", None), "length", None) if f is not None else None
    if not isinstance(length, (int, float)) or not length > 0:
        return None
    return float(length) * 1000.0


def duration_ms(data: bytes, fmt: str, pcm_rate: int = PCM_RATE) -> float | None:
    """The decoded duration (ms) of a whole audio body in `fmt` (a SPEECH_FORMATS name or a
    file extension), None when its bytes do not say."""
    fmt = fmt.lower()
    if fmt == "pcm":
        return pcm_ms(len(data), pcm_rate)
    if fmt == "wav":
        return wav_ms(data)
    if fmt in _COMPRESSED:
        return compressed_ms(data)
    return None


def needs_body(fmt: str) -> bool:
    """Whether the duration needs the whole body kept (compressed formats), not just a count."""
    return fmt.lower() in _COMPRESSED


def wav_bytes(pcm: bytes, rate: int = PCM_RATE, width: int = PCM_WIDTH, channels: int = 1) -> bytes:
    """A canonical 44-byte-header WAV of `pcm` (the simulated engine's and the tests' form)."""
    return wav_header(len(pcm), rate, width, channels) + pcm


def wav_header(
    n_bytes: int, rate: int = PCM_RATE, width: int = PCM_WIDTH, channels: int = 1
) -> bytes:
    """The 44-byte header of a WAV whose data will be `n_bytes` of PCM."""
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + n_bytes,
        b"WAVE",
        b"fmt ",
        16,
        1,
        channels,
        rate,
        rate * width * channels,
        width * channels,
        width * 8,
        b"data",
        n_bytes,
    )
