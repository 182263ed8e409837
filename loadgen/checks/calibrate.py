"""Before a run: one tiny request proves the target streams (preflight), and two probes of
different sizes calibrate how many tokens the server counts per synthetic word, from its own
usage report, so planned prompt lengths are true without a local tokenizer.
"""

from __future__ import annotations

import time

from loadgen.engine.workload import Prompt, Workload, calibrate_tokens_per_word, request_body
from loadgen.errors import TransportError
from loadgen.results.records import make_request_id
from loadgen.runspec.spec import RunSpec
from loadgen.runspec.target_spec import SPEECH_API, TRANSCRIPTION_API
from loadgen.target import EventKind, PreparedRequest, Target

PROBE_WORDS = (64, 256)
PROBE_ATTEMPTS = 3  # a probe that fails (a flaky server) is tried again, then left out


async def probe_prompt_tokens(spec: RunSpec, target: Target, words: int, run_id: str) -> int | None:
    """Send one synthetic prompt of `words` words with max_tokens=1; the server's prompt_tokens."""
    wl = Workload(spec, shard_seed=0x0CA1, tokens_per_word=1.0)
    prompt = wl.prompt(10_000_000 + words, prompt_tokens=words, output_tokens=1)
    body = request_body(spec, Prompt(prompt.messages, words, 1))
    req = PreparedRequest(
        make_request_id(run_id, "calibration", words),
        body,
        words,
        1,
        deadline_s=min(spec.target.deadline_s, 60.0),
        idle_timeout_s=min(spec.target.idle_timeout_s, 30.0),
    )
    usage_prompt = None
    try:
        async for ev in target.stream(req, time.perf_counter_ns):
            if ev.kind is EventKind.USAGE and ev.usage is not None:
                usage_prompt = ev.usage.prompt_tokens
    except TransportError:
        return None  # a failed probe only leaves this size out of the fit
    return usage_prompt


async def calibrate(spec: RunSpec, target: Target, run_id: str) -> float:
    """Tokens per synthetic word (1.0 when the server reports no usage, a dataset is used, or
    the API is an audio one: speech's text is measured in words, transcription sends audio)."""
    audio_api = spec.target.api in (SPEECH_API, TRANSCRIPTION_API)
    if spec.workload.dataset is not None or not spec.target.include_usage or audio_api:
        return 1.0
    samples: list[tuple[int, int]] = []
    for words in PROBE_WORDS:
        for _ in range(PROBE_ATTEMPTS):
            got = await probe_prompt_tokens(spec, target, words, run_id)
            if got:
                samples.append((words, got))
                break
    return calibrate_tokens_per_word(samples)
