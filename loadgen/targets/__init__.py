"""Targets: clients that turn a `PreparedRequest` into stamped `StreamEvent`s (loadgen.target),
the failure classifier the runner records with, preflight, and the target policy."""

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
