"""Targets: clients that turn a `PreparedRequest` into stamped `StreamEvent`s (loadgen.target),
the failure classifier the runner records with, preflight, and the target policy.

    built = build_target(resolve_target(spec.target), policy_from_env(), max_connections=n)
    target = built.client                       # transport: spec.target.transport ("auto": raw)
    await preflight(target); await target.warm(n)   # loadgen.targets.preflight
    async for ev in built.sender.stream(prepared, time.perf_counter_ns): ...  # except: classify
    await target.aclose()

The names below are loaded on first use, so a module that needs one leaf (the simulator's
`loadgen.targets.audio`, say) does not pay for httpx and every API's client. `preflight` is
imported from its module (`loadgen.targets.preflight`): a lazy package name cannot share its
name with a submodule, which the import system binds over it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.targets.factory import BuiltTarget, build_target
    from loadgen.targets.failures import classify, redact
    from loadgen.targets.openai import OpenAITarget
    from loadgen.targets.policy import TargetPolicy, check_target, policy_from_env

_HOME = {
    "BuiltTarget": "factory",
    "build_target": "factory",
    "classify": "failures",
    "redact": "failures",
    "OpenAITarget": "openai",
    "TargetPolicy": "policy",
    "check_target": "policy",
    "policy_from_env": "policy",
}

__all__ = [
    "BuiltTarget",
    "OpenAITarget",
    "TargetPolicy",
    "build_target",
    "check_target",
    "classify",
    "policy_from_env",
    "redact",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
