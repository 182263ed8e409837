"""Starting a run from the Launch page: the spec is parsed and its target checked against the
operator's policy (`PEAKLOAD_ALLOW_PRIVATE_TARGETS`, `PEAKLOAD_TARGET_ALLOWLIST`; private and
loopback targets refused unless allowed) before anything starts, and probed (what the target does
with each request parameter the spec sends, as `peakload probe --spec`) before Start. Local mode
runs the shards in a background thread of this server (`workers.local.run_local`); with
`PEAKLOAD_REDIS_URL` set the run goes to the Celery workers (`workers.coordinator.Coordinator`).
"""

from __future__ import annotations

import os
import threading
import tomllib
from dataclasses import dataclass, field

from loadgen.errors import PeakloadError, SpecError
from loadgen.runspec.spec import RunSpec, spec_from_dict
from loadgen.targets import policy_from_env
from loadgen.targets.probe import REJECTED, ProbeResult, probe_sync, spec_checks

REDIS_ENV = "PEAKLOAD_REDIS_URL"
STARTED_WAIT_S = 60.0


def parse_spec(text: str, where: str) -> RunSpec:
    """A run spec from TOML text; SpecError names `where` and the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=where) from None
    return spec_from_dict(data, where=where)


def check_policy(spec: RunSpec) -> None:
    """PolicyError unless the operator's policy allows the spec's target (the UI's policy has no
    local-mode exception: loopback and private addresses need an explicit allowance)."""
    policy_from_env().check(spec.target.base_url)


def probe(spec: RunSpec) -> ProbeResult:
    """`peakload probe --spec`'s verdicts for what this spec sends, under the UI's policy (no
    private-address exception: PolicyError unless allowed); PreflightError when unreachable."""
    check_policy(spec)
    checks, extra = spec_checks(spec)
    return probe_sync(spec.target, checks, extra, allow_private=False)


def probe_table(result: ProbeResult) -> list[dict[str, str]]:
    """One row per parameter: parameter, verdict, detail."""
    return [
        {"parameter": v.param, "verdict": v.verdict, "detail": v.detail} for v in result.verdicts
    ]


def rejected(result: ProbeResult) -> list[str]:
    """The parameters the target rejected (a run sending them would fail every request)."""
    return [v.param for v in result.verdicts if v.verdict == REJECTED]


def mode() -> str:
    return "distributed" if os.environ.get(REDIS_ENV, "").strip() else "local"


@dataclass
class Launched:
    """A run started from the UI: its id once the store has it, and how it ended (local)."""

    mode: str
    run_id: str | None = None
    error: str | None = None
    done: bool = False
    status: str | None = None
    started: threading.Event = field(default_factory=threading.Event)


def launch(spec: RunSpec, database_url: str, launched_by: str | None = None) -> Launched:
    """Check the policy, then start the run; returns once it has a run id (or an error).
    `launched_by` (the signed-in user) is kept with the run."""
    check_policy(spec)
    if mode() == "distributed":
        from workers.coordinator import Coordinator, SubmitOptions

        out = Launched("distributed")
        try:
            result = Coordinator.from_env().submit(spec, SubmitOptions(launched_by=launched_by))
        except PeakloadError as exc:
            out.error, out.done = str(exc), True
            return out
        out.run_id, out.status = result.run_id, result.status
        if not result.started:
            out.error, out.done = result.reason, True
        out.started.set()
        return out
    return _launch_local(spec, database_url, launched_by)


def _launch_local(spec: RunSpec, database_url: str, launched_by: str | None) -> Launched:
    from workers.local import run_local

    out = Launched("local")

    def started(run_id: str) -> None:
        out.run_id = run_id
        out.started.set()

    def body() -> None:
        try:
            result = run_local(
                spec, database_url=database_url, on_started=started, launched_by=launched_by
            )
            out.run_id, out.status = result.run_id, result.status
        except Exception as exc:  # shown on the page; the thread must not die silently
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            out.done = True
            out.started.set()

    threading.Thread(target=body, name=f"peakload-ui-run-{spec.name}", daemon=True).start()
    out.started.wait(STARTED_WAIT_S)
    return out
