"""The one way a process builds the target it sends to: the policy's check of the URL, the API
client over the spec's (or the caller's) transport, and the pacing wrapper when the run paces.

    built = build_target(resolve_target(spec.target), policy, max_connections=n, pacer=pacer)
    await preflight(built.client)            # preflight and calibration are not the run's load
    await run_shard(plan, built.sender, ...)  # the runner sends through the pacer, if any
    await built.client.aclose()
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.pacing import PacedTarget, Pacer
from loadgen.spec import TargetSpec
from loadgen.target import Target
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.policy import TargetPolicy


@dataclass(frozen=True, slots=True)
class BuiltTarget:
    """`client` speaks the API (preflight, calibration, warm-up, closing); `sender` is what a
    run's load goes through: `client` itself, or `client` behind the run's pacer."""

    client: OpenAITarget
    sender: Target


def build_target(
    spec: TargetSpec,
    policy: TargetPolicy | None,
    *,
    max_connections: int,
    transport: str | None = None,
    pacer: Pacer | None = None,
) -> BuiltTarget:
    """A target for `spec` (already resolved by loadgen.secrets.resolve_target in the sending
    process) with a pool of up to `max_connections`. `policy` is checked against `spec.base_url`
    first (PolicyError, before anything is set up); None only where the process that planned
    the run checked this very URL (a distributed shard's planned target), which the call site
    says. `transport` overrides `spec.transport`; `pacer` wraps the sender (loadgen.pacing)."""
    if policy is not None:
        policy.check(spec.base_url)
    client = OpenAITarget(spec, max_connections=max_connections, transport=transport)
    return BuiltTarget(client, client if pacer is None else PacedTarget(client, pacer))
