"""Probing a spec's own request parameters before `run` or `submit` starts it: the probe runs
from this host, a run whose parameters the target rejects is refused (PreflightError naming
each one and the server's error), and the result is stored with the run."""

from __future__ import annotations

from typing import Any

from loadgen.errors import PreflightError
from loadgen.runspec.spec import RunSpec
from loadgen.targets.probe import ProbeResult, probe_sync, spec_checks


def probe_spec(spec: RunSpec, *, allow_private: bool = True) -> ProbeResult:
    checks, extra = spec_checks(spec)
    return probe_sync(spec.target, checks, extra, allow_private=allow_private)


def refuse_rejected(result: ProbeResult) -> None:
    rejected = result.rejected
    if rejected:
        what = "; ".join(f"{v.param}: {v.detail}" for v in rejected)
        raise PreflightError(
            f"{result.target} rejects parameter(s) this spec sends — {what}. Change the spec "
            "(or run with --no-probe to send them anyway)"
        )


def checked_probe(spec: RunSpec, *, allow_private: bool = True) -> dict[str, Any]:
    """Probe, refuse a rejected parameter, return the result to store. `allow_private`: a
    local run may aim at private addresses; a distributed one only as its policy says."""
    result = probe_spec(spec, allow_private=allow_private)
    refuse_rejected(result)
    return result.to_dict()
