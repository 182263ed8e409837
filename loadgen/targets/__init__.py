"""Targets: clients that turn a `PreparedRequest` into stamped `StreamEvent`s (loadgen.target),
the failure classifier the runner records with, preflight, and the target policy.

    check_target(spec.target.base_url, allow_private=..., allowlist=...)   # or policy_from_env()
    target = OpenAITarget(spec.target, max_connections=n)                 # transport="auto": raw
    await preflight(target); await target.warm(n)
    async for ev in target.stream(prepared, time.perf_counter_ns): ...     # except e: classify(e)
    await target.aclose()
"""

from __future__ import annotations

from loadgen.targets.failures import classify, redact
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.policy import TargetPolicy, check_target, policy_from_env
from loadgen.targets.preflight import preflight

__all__ = [
    "OpenAITarget",
    "TargetPolicy",
    "check_target",
    "classify",
    "policy_from_env",
    "preflight",
    "redact",
]
