"""Targets: clients that turn a `PreparedRequest` into stamped `StreamEvent`s (loadgen.target),
the failure classifier the runner records with, preflight, and the target policy.

    built = build_target(resolve_target(spec.target), policy_from_env(), max_connections=n)
    target = built.client                       # transport: spec.target.transport ("auto": raw)
    await preflight(target); await target.warm(n)
    async for ev in built.sender.stream(prepared, time.perf_counter_ns): ...  # except: classify
    await target.aclose()
"""

from __future__ import annotations

from loadgen.targets.factory import BuiltTarget, build_target
from loadgen.targets.failures import classify, redact
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.policy import TargetPolicy, check_target, policy_from_env
from loadgen.targets.preflight import preflight

__all__ = [
    "BuiltTarget",
    "OpenAITarget",
    "TargetPolicy",
    "build_target",
    "check_target",
    "classify",
    "policy_from_env",
    "preflight",
    "redact",
]
