"""The speech workloads' per-request metrics (loadgen.results.formulas' form: Python and SQL side
by side), over the audio columns of deploy/sql/0210 and the stamps every request has:

- `ttfab_ms`: time to the first audio byte (speech out) from send: the first chunk's stamp,
  as TTFT is for text (for speech in it is the time to the first transcript text);
- `audio_rtf`: the real-time factor, processing time / audio length = E2E from send / audio_ms
  (below 1: faster than real time; speech out: the audio the answer decoded to; speech in: the
  upload's length);
- `audio_speed_x`: audio seconds delivered per wall second = audio_ms / E2E (speech out);
- `words_per_s`: transcript words per second of E2E (speech in).

NaN where a request has no audio (any other API, or a format whose length its bytes do not say).
"""

from __future__ import annotations

import numpy as np

from loadgen.results.formulas import NS_PER_MS, FloatArray, RequestMetric


def ttfab_ms(first_token_ns: FloatArray, sent_ns: FloatArray) -> FloatArray:
    """Time to first audio byte from send: (first_token_ns - sent_ns) / 1e6 (the first audio
    chunk is a speech answer's first output event)."""
    return (first_token_ns - sent_ns) / NS_PER_MS


TTFAB = RequestMetric(
    "ttfab_ms",
    "ms",
    ("first_token_ns", "sent_ns"),
    ttfab_ms,
    "(first_token_ns - sent_ns)::float8 / 1e6",
    "first_token_ns - sent_ns (from send; the first audio chunk, or transcript text), ms",
)


def audio_rtf(end_ns: FloatArray, sent_ns: FloatArray, audio_ms: FloatArray) -> FloatArray:
    """Real-time factor: ((end_ns - sent_ns) / 1e6) / audio_ms; NaN without audio."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = ((end_ns - sent_ns) / NS_PER_MS) / audio_ms
    return np.where(audio_ms > 0, out, np.nan)


AUDIO_RTF = RequestMetric(
    "audio_rtf",
    "x",
    ("end_ns", "sent_ns", "audio_ms"),
    audio_rtf,
    "CASE WHEN audio_ms > 0 THEN ((end_ns - sent_ns)::float8 / 1e6) / audio_ms END",
    "(end_ns - sent_ns) / audio_ms: processing time per second of audio (< 1: faster than "
    "real time)",
)


def audio_speed_x(end_ns: FloatArray, sent_ns: FloatArray, audio_ms: FloatArray) -> FloatArray:
    """Audio seconds delivered per wall second: audio_ms / ((end_ns - sent_ns) / 1e6)."""
    e2e = (end_ns - sent_ns) / NS_PER_MS
    with np.errstate(divide="ignore", invalid="ignore"):
        out = audio_ms / e2e
    return np.where((e2e > 0) & (audio_ms > 0), out, np.nan)


AUDIO_SPEED = RequestMetric(
    "audio_speed_x",
    "x",
    ("end_ns", "sent_ns", "audio_ms"),
    audio_speed_x,
    "CASE WHEN audio_ms > 0 AND end_ns > sent_ns THEN "
    "audio_ms / ((end_ns - sent_ns)::float8 / 1e6) END",
    "audio_ms / (end_ns - sent_ns): audio seconds delivered per wall second",
)


def words_per_s(end_ns: FloatArray, sent_ns: FloatArray, words: FloatArray) -> FloatArray:
    """Transcript words per second of E2E: transcript_words / ((end_ns - sent_ns) / 1e9)."""
    s = (end_ns - sent_ns) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        out = words / s
    return np.where((s > 0) & (words >= 0), out, np.nan)


WORDS_PER_S = RequestMetric(
    "words_per_s",
    "words/s",
    ("end_ns", "sent_ns", "transcript_words"),
    words_per_s,
    "CASE WHEN end_ns > sent_ns THEN transcript_words / ((end_ns - sent_ns)::float8 / 1e9) END",
    "transcript_words / (end_ns - sent_ns), words per second",
)

AUDIO_FORMULAS = (TTFAB, AUDIO_RTF, AUDIO_SPEED, WORDS_PER_S)
AUDIO_SLO_METRICS = ("ttfab_ms", "audio_rtf")
"""The audio metrics an SLO or a claim may name (lower is better, like every latency)."""
