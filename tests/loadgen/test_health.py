"""The self-check's verdict rule (loadgen.engine.health.SelfCheck), fed per-second readings directly
so it tests the rule, not this machine's speed: CPU, lag and dispatch delay are judged over the
seconds in which the generator had work, each weighted by its length."""

from __future__ import annotations

from loadgen.engine.health import SelfCheck
from loadgen.runspec.spec import ValiditySpec
from loadgen.target import EventKind, StreamEvent


class FakeCpu:
    """Stands in for CpuMeter: the next readings (wall s, CPU %) in order."""

    def __init__(self) -> None:
        self.next: list[tuple[float, float]] = []
        self.last_wall_s = 0.0

    def take(self) -> float:
        self.last_wall_s, pct = self.next.pop(0)
        return pct


class Feed:
    def __init__(self) -> None:
        self.chunks = 0
        self.check = SelfCheck(lambda: 0, activity=lambda: self.chunks)
        self.cpu = FakeCpu()
        self.check.cpu = self.cpu  # type: ignore[assignment]

    def second(
        self,
        wall_s: float,
        cpu: float,
        *,
        sends: int = 0,
        chunks: int = 0,
        lag_ms: float = 0.1,
        dispatch_ms: float = 0.1,
    ) -> None:
        self.chunks += chunks
        self.check.dispatch_second = [dispatch_ms] * sends
        self.check.lag.second = [lag_ms] * 200  # the probe's 5 ms samples
        self.check.lag.weights = [1] * 200
        self.cpu.next.append((wall_s, cpu))
        self.check.take_second()


BOUNDS = ValiditySpec()


def test_a_short_runs_last_partial_tick_is_not_a_saturated_second() -> None:
    # the case, reproduced: 1.49 s and 1.0 s ticks at 3-4% CPU, then the shard's last
    # tick of 0.5 ms at 93% (teardown work): "CPU >= 90% in 1 of 3 seconds" before
    f = Feed()
    f.second(1.49, 3.5, sends=6, chunks=20)
    f.second(1.0, 3.9, sends=8, chunks=30)
    f.second(0.0005, 93.0, sends=0, chunks=1)
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert valid, reasons
    assert health["work_s"] > 2.4 and health["cpu_busy_late_s"] == 0.0


def test_full_cpu_on_instant_refusals_while_on_time_is_valid() -> None:
    # a closed loop against a server answering 503 at once spins at full CPU; every send is on
    # time and the loop answers within bounds: the server's errors decide, not the generator
    f = Feed()
    for _ in range(5):
        f.second(1.0, 99.0, sends=4000, chunks=0, lag_ms=0.3, dispatch_ms=0.2)
    valid, reasons, _ = f.check.verdict(BOUNDS)
    assert valid, reasons


def test_full_cpu_while_late_is_invalid() -> None:
    f = Feed()
    for _ in range(3):
        f.second(1.0, 50.0, sends=10, chunks=100)
    for _ in range(2):
        f.second(1.0, 98.0, sends=10, chunks=100, dispatch_ms=0.4, lag_ms=6.0)
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert not valid
    assert any("CPU at or above 90% while it was late" in r for r in reasons)
    assert health["cpu_busy_late_s"] == 2.0 and health["work_s"] == 5.0


def test_lag_is_judged_over_seconds_with_work_only() -> None:
    # a long idle stretch of 0.1 ms lag must not dilute two busy seconds of 5 ms lag
    f = Feed()
    for _ in range(2):
        f.second(1.0, 20.0, sends=10, chunks=50, lag_ms=5.0)
    for _ in range(300):
        f.second(1.0, 0.5, lag_ms=0.1)  # no send, no chunk: a drained level, a slow server
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert not valid and any("event-loop lag p99" in r for r in reasons), reasons
    assert health["loop_lag_p99_ms"] >= 5.0
    assert f.check.lag.total.quantile(0.99) < 1.0  # what the old rule looked at


def test_a_late_send_is_judged_whatever_the_cpu() -> None:
    f = Feed()
    f.second(1.0, 5.0, sends=100, chunks=100, dispatch_ms=0.2)
    f.second(1.0, 5.0, sends=5, chunks=100, dispatch_ms=7.3)
    valid, reasons, _ = f.check.verdict(BOUNDS)
    assert not valid and any("dispatch delay p99" in r for r in reasons)


MS = 1_000_000


def _tokens(f: Feed, n: int, spread_ms: float, wake_ms: float, *, first: bool) -> None:
    """`n` kernel-stamped tokens, read together with others (spread > 0) or alone."""
    ev = StreamEvent(EventKind.CONTENT, 0, tokens=1)
    ev.spread_ns, ev.wake_spread_ns = int(spread_ms * MS), int(wake_ms * MS)
    for _ in range(n):
        if first:
            f.check.first_tokens += 1
        if ev.spread_ns == 0:
            f.check.exact_stamped += 1
        else:
            f.check.note_merged(ev, first)


def _kernel_run(lag_ms: float) -> Feed:
    f = Feed()
    for _ in range(3):
        f.second(1.0, 20.0, sends=10, chunks=1000, lag_ms=lag_ms)
    _tokens(f, 9_000, 0, 0, first=False)
    _tokens(f, 100, 0, 0, first=True)
    return f


def test_tokens_read_together_over_the_bound_are_possibly_off_whatever_the_probe() -> None:
    """Spreads over the bound by the loop's own record: off, though the probe saw no lag."""
    f = _kernel_run(lag_ms=0.1)
    _tokens(f, 200, 5.0, 5.0, first=False)
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert not valid and any("of token stamps may be off" in r for r in reasons), reasons
    assert health["tokens_possibly_off_share"] == 200 / 9_300


def test_tokens_read_together_within_the_bound_are_exact_enough() -> None:
    """Most tokens read together, every spread within the bound: valid, even with a late loop
    (the loop's record of its iterations rules the lateness out for each read)."""
    f = _kernel_run(lag_ms=6.0)
    _tokens(f, 9_000, 1.5, 1.5, first=False)
    _tokens(f, 100, 1.5, 1.5, first=True)
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert valid, reasons
    assert health["tokens_read_together_share"] == 0.5
    assert health["tokens_possibly_off_share"] == 0.0


def test_tokens_off_only_if_woken_late_are_judged_by_the_probe() -> None:
    """Within the bound if the loop was woken on time, over it otherwise: off as often as the
    probe found the loop late, no more."""
    prompt = _kernel_run(lag_ms=0.1)
    _tokens(prompt, 9_000, 0.4, 25.0, first=False)
    valid, reasons, health = prompt.check.verdict(BOUNDS)
    assert valid, reasons
    assert health["tokens_possibly_off_share"] == 0.0
    late = _kernel_run(lag_ms=6.0)
    _tokens(late, 9_000, 0.4, 25.0, first=False)
    valid, reasons, health = late.check.verdict(BOUNDS)
    assert not valid and any("of token stamps may be off" in r for r in reasons), reasons
    assert health["tokens_possibly_off_share"] == 9_000 / 18_100  # min(read so, the probe's 100 %)


def test_first_tokens_are_judged_on_their_own() -> None:
    """2 % of first tokens possibly off moves the TTFT p99, though few of all tokens are."""
    f = _kernel_run(lag_ms=0.1)
    _tokens(f, 3, 8.0, 8.0, first=True)
    valid, reasons, health = f.check.verdict(BOUNDS)
    assert not valid, reasons
    assert any("of TTFTs may be off" in r for r in reasons)
    assert not any("of token stamps may be off" in r for r in reasons)
    assert health["first_tokens_possibly_off_share"] == 3 / 103
