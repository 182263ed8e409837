"""The one way a process builds the target it sends to: the policy's check of the URL, the API
client over the spec's (or the caller's) transport, and the pacing wrapper when the run paces
(`paced_by`: the pacer for a shard's share of the run's load).

    built = build_target(resolve_target(spec.target), policy, max_connections=n, pacer=pacer)
    await preflight(built.client)            # preflight and calibration are not the run's load
    await run_shard(plan, built.sender, ...)  # the runner sends through the pacer, if any
    await built.client.aclose()
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.runspec.pacing import MINUTE_S, PacedTarget, Pacer, effective_limits
from loadgen.runspec.spec import RunSpec
from loadgen.runspec.target_spec import TargetSpec
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
    """A target for `spec` (already resolved by loadgen.runspec.secrets.resolve_target in the
    sending process) with a pool of up to `max_connections`. `policy` is checked against
    `spec.base_url` first (PolicyError, before anything is set up); None only where the process that
    planned the run checked this very URL (a distributed shard's planned target), which the call
    site says. `transport` overrides `spec.transport`; `pacer` wraps the sender
    (loadgen.runspec.pacing)."""
    if policy is not None:
        policy.check(spec.base_url)
    client = OpenAITarget(spec, max_connections=max_connections, transport=transport)
    return BuiltTarget(client, client if pacer is None else PacedTarget(client, pacer))


def paced_by(spec: RunSpec, share: float) -> Pacer | None:
    """The pacer for `share` (0-1] of the run's load, or None when the spec does not pace.
    Limits: the spec's, else its target preset's published ones (loadgen.runspec.presets)."""
    if not spec.pacing.enabled:
        return None
    from loadgen.runspec.presets import load_preset

    preset = load_preset(spec.target.preset) if spec.target.preset else None
    limits = preset.limits if preset else None
    windows = preset.ratelimit_headers if preset else None
    rpm, tpm = effective_limits(
        spec.pacing,
        float(limits.requests_per_minute) if limits and limits.requests_per_minute else None,
        float(limits.tokens_per_minute) if limits and limits.tokens_per_minute else None,
    )
    return Pacer(
        rpm * share if rpm else None,
        tpm * share if tpm else None,
        headroom=spec.pacing.headroom,
        share=share,
        requests_window_s=windows.requests_window_s if windows else MINUTE_S,
        tokens_window_s=windows.tokens_window_s if windows else MINUTE_S,
    )
