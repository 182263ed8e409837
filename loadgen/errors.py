"""Every exception peakload raises on purpose. Failed *requests* are records, never exceptions;
only configuration and infrastructure problems raise, from this tree:

    PeakloadError                     base; `str(e)` is a message a user can act on
    ├── SpecError                     a run spec or claims file is malformed or impossible
    ├── CapacityError                 a load this process cannot hold (streams, memory, fds)
    ├── PolicyError                   a target is refused by the operator's target policy
    ├── PreflightError                a target is unreachable / wrong key / not streaming
    ├── StoreError                    the store cannot be reached or migrated
    │   └── SpoolFullError            the local spool is full: the run fails loudly
    ├── CoordinationError             workers missing, start aborted, shard already claimed
    ├── RunFailed                     a run that exists in the store ended `failed` (its reason)
    ├── MetricsError                  the live metrics server cannot listen where asked
    └── TransportError                raised inside targets, mapped to an Outcome by the runner
        ├── HttpStatusError           non-2xx response (status, retry_after_s)
        ├── StreamProtocolError       malformed/truncated stream, HTML instead of SSE, reset
        ├── InBandError               `data: {"error": ...}` after a 200
        └── PhaseTimeout              a timeout in a named phase (connect, headers, idle, deadline)
"""

from __future__ import annotations


class PeakloadError(Exception):
    """Base of every error peakload raises on purpose."""


class SpecError(PeakloadError):
    """A run spec (or claims file) is malformed or impossible. `where` names the file/field;
    `problems` holds one line per bad field (a form shows each beside its field)."""

    def __init__(self, message: str, where: str = "", problems: list[str] | None = None) -> None:
        self.where = where
        self.problems = problems if problems is not None else [message]
        super().__init__(f"{where}: {message}" if where else message)


class CapacityError(PeakloadError):
    """Refused before any work: the numbers needed and the limits they exceed."""


class PolicyError(PeakloadError):
    pass


class MetricsError(PeakloadError):
    """The live metrics server (loadgen.engine.livemetrics) cannot listen where asked."""


class PreflightError(PeakloadError):
    pass


class StoreError(PeakloadError):
    pass


class SpoolFullError(StoreError):
    pass


class CoordinationError(PeakloadError):
    pass


class RunFailed(PeakloadError):
    """The run row exists and was marked `failed` with this reason; nothing is left running."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id} failed: {reason}")


class TransportError(PeakloadError):
    """Raised by a target while streaming; carries what the runner needs for the record."""

    def __init__(self, detail: str, *, t_ns: int | None = None) -> None:
        self.detail = detail
        self.t_ns = t_ns  # monotonic ns when the failure was observed, if known
        super().__init__(detail)


class HttpStatusError(TransportError):
    def __init__(
        self,
        status: int,
        detail: str = "",
        *,
        retry_after_s: float | None = None,
        t_ns: int | None = None,
    ) -> None:
        self.status = status
        self.retry_after_s = retry_after_s
        super().__init__(f"HTTP {status}{': ' + detail if detail else ''}", t_ns=t_ns)


class StreamProtocolError(TransportError):
    pass


class InBandError(TransportError):
    pass


class PhaseTimeout(TransportError):
    PHASES = ("connect", "headers", "first_token", "idle", "deadline")

    def __init__(self, phase: str, detail: str = "", *, t_ns: int | None = None) -> None:
        assert phase in self.PHASES, phase
        self.phase = phase
        super().__init__(detail or f"timed out in phase {phase}", t_ns=t_ns)
