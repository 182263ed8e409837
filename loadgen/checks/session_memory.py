"""What one multi-turn session holds at its last turn: the conversation so far (first prompt,
every user turn, every answer), counted in tokens and bytes, for admission's memory check."""

from __future__ import annotations

import math

from loadgen.runspec.lengths import FixedLength, LognormalLength, NormalLength, UniformLength
from loadgen.runspec.workload_spec import SessionSpec, WorkloadSpec

# A token of the generated text is about 5 characters (the vocabulary's words average 4.8
# with their space), held three times at a session's last turn: the context list, the
# request body encoded from it, and the answer's text as it is read. 16 bytes per token.
BYTES_PER_TOKEN = 16


def mean_tokens(dist: FixedLength | UniformLength | NormalLength | LognormalLength) -> float:
    """The expected length of a draw (clamped to the distribution's max where it has one)."""
    if isinstance(dist, FixedLength):
        return float(dist.value)
    if isinstance(dist, UniformLength):
        return (dist.min + dist.max) / 2
    if isinstance(dist, NormalLength):
        mean = max(float(dist.min), dist.mean)
    else:
        mean = max(float(dist.min), dist.median * math.exp(dist.sigma**2 / 2))
    return mean if dist.max is None else min(mean, float(dist.max))


def session_tokens(workload: WorkloadSpec, sessions: SessionSpec) -> float:
    """Tokens of context a session holds at its last turn: the first prompt, the user's words
    of every later turn and every answer (each as long as its output cap, on average)."""
    prompt = mean_tokens(workload.prompt_tokens)
    user = mean_tokens(sessions.user_tokens_per_turn)
    output = mean_tokens(workload.output_tokens)
    return prompt + (sessions.turns - 1) * user + sessions.turns * output


def session_bytes(workload: WorkloadSpec) -> int:
    """Bytes one stream's session holds at its peak; 0 for single-turn workloads."""
    if workload.sessions is None:
        return 0
    return math.ceil(session_tokens(workload, workload.sessions) * BYTES_PER_TOKEN)
