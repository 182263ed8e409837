"""The generator watching itself: event-loop lag, dispatch delay, CPU and how token stamps were
taken, summarised per second for ticks and over the whole shard for the validity verdict
(`SelfCheck.verdict`).

Distributions are kept in fixed log-spaced histograms (bounded memory however long the run);
they only decide validity and are never reported as latencies of the server.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.engine.lagprobe import Histogram, LoopLagProbe
from loadgen.engine.lateness import CauseMeter, Causes, late_totals, name_cause
from loadgen.runspec.spec import ValiditySpec
from loadgen.target import StreamEvent

# the share of working time the generator may be CPU-bound and late before the run is invalid
CPU_BUSY_SHARE = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process (bytes), from /proc when available."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class CpuMeter:
    """This process's CPU use between calls, in percent of one core; `last_wall_s` is how long
    the last interval was (the final one of a shard is a fraction of a second)."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        self.last_wall_s = 0.0

    def take(self) -> float:
        cpu, wall = time.process_time(), time.perf_counter()
        d_wall = wall - self._wall
        pct = 100.0 * (cpu - self._cpu) / d_wall if d_wall > 0 else 0.0
        self._cpu, self._wall = cpu, wall
        self.last_wall_s = max(d_wall, 0.0)
        return pct


@dataclass(frozen=True, slots=True)
class Second:
    """One tick's interval as the verdict sees it: how long it was (s), CPU %, whether the
    generator had work (a send or a stamped chunk), and how late it was at worst (ms)."""

    wall_s: float
    cpu: float
    work: bool
    lag_p99_ms: float
    dispatch_max_ms: float


class SelfCheck:
    """Everything the generator records about itself during a shard, and the verdict on it:
    the loop-lag probe, dispatch delays, CPU per second and how token stamps were taken."""

    def __init__(
        self,
        clock: Callable[[], int],
        activity: Callable[[], int],
        bound_ms: float = ValiditySpec().max_loop_lag_p99_ms,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.bound_ns = int(bound_ms * 1e6)  # a token stamp's error judged (the verdict's bound)
        self.lag = LoopLagProbe(clock, activity=activity, busy=busy)
        self.cpu = CpuMeter()
        self.cpu_ticks: list[float] = []
        self.seconds: list[Second] = []
        self.causes = CauseMeter()  # made on the loop's thread: its run-queue wait is measured
        self.cause_seconds: list[Causes] = []  # one per entry of `seconds`
        self._activity = activity
        self._activity_seen = 0
        self.dispatch_second: list[float] = []  # ms, since the last tick
        self.dispatch_all = Histogram()
        # token stamps by kind: kernel-stamped alone in their read (exact), kernel-stamped
        # with other events in one read (see StreamEvent.spread_ns), stamped in user space
        self.exact_stamped = self.merged_stamped = self.user_stamped = 0
        # of the merged: those whose spread is over the bound (may be off whatever the probe
        # says), and those over it only if the loop's wake-up was late (`wake_spread_ns`)
        self.merged_off = self.merged_if_late = 0
        # each request's first token (its TTFT): how many, in a merged read, and of those as above
        self.first_tokens = self.first_merged = 0
        self.first_off = self.first_if_late = 0

    def note_merged(self, ev: StreamEvent, first: bool) -> None:
        """Count a token event that came in one kernel-stamped read with others."""
        self.merged_stamped += 1
        off = ev.spread_ns > self.bound_ns
        if_late = not off and ev.wake_spread_ns > self.bound_ns
        self.merged_off += off
        self.merged_if_late += if_late
        if first:
            self.first_merged += 1
            self.first_off += off
            self.first_if_late += if_late

    def take_second(self) -> tuple[float, float, float, float]:
        """(lag max, lag p99, dispatch delay max, CPU %) of the last second, folded in."""
        disp, self.dispatch_second = self.dispatch_second, []
        seen = self._activity()
        work = bool(disp) or seen > self._activity_seen
        self._activity_seen = seen
        lag_max, lag_p99 = self.lag.take_second(work)
        self.dispatch_all.add_many(disp)
        cpu = self.cpu.take()
        self.cpu_ticks.append(cpu)
        disp_max = max(disp) if disp else 0.0
        self.seconds.append(Second(self.cpu.last_wall_s, cpu, work, lag_p99, disp_max))
        self.cause_seconds.append(self.causes.take())
        return lag_max, lag_p99, disp_max, cpu

    @property
    def kernel_stamped(self) -> bool:
        """Token stamps are the kernel's receive times, but for at most 1 in 1,000 (a read the
        kernel gave no stamp, e.g. while it switches stamping on): too few to move a p99."""
        kernel = self.exact_stamped + self.merged_stamped
        return kernel > 0 and self.user_stamped * 1000 <= kernel + self.user_stamped

    def verdict(self, v: ValiditySpec) -> tuple[bool, list[str], dict[str, float]]:
        """Valid unless the generator shaped the numbers.

        Token stamps taken in user space are late by the loop's lag: its p99 must stay within
        the bound. A kernel stamp is exact for a read that carried one token event; when events
        came in one read, the earlier ones may have arrived before its stamp by up to the read's
        spread, which the loop's own record of its iterations narrows (`StreamEvent.spread_ns`,
        loadgen/targets/loopwatch.py). Each such token is judged on its own read: off if its
        spread exceeds the bound; off if its loop's wake-up was late when only that can put it
        over (`wake_spread_ns`), which the probe judges: those count at most as often as the
        probe found the loop over the bound late. The share that may be off must stay within
        1 % (the p99). TTFT is one value per request, so the same rule holds for each request's
        first token on its own: a few first tokens read late move the TTFT p99 while hardly
        moving the share of all tokens."""
        bound = v.max_loop_lag_p99_ms
        # seconds without a send or a chunk cannot shape a number: their lag is not judged
        lag99 = self.lag.work.quantile(0.99)
        lag_over = self.lag.work.share_above(bound)
        kernel = self.exact_stamped + self.merged_stamped
        merged = self.merged_stamped / kernel if kernel else 0.0
        off = _possibly_off(self.merged_off, self.merged_if_late, kernel, lag_over)
        first_merged = self.first_merged / self.first_tokens if self.first_tokens else 0.0
        first_off = _possibly_off(self.first_off, self.first_if_late, self.first_tokens, lag_over)
        disp99 = self.dispatch_all.quantile(0.99)
        busy_s, work_s = self.cpu_busy_seconds(v)
        reasons = []
        if self.kernel_stamped:
            if off > 0.01:
                reasons.append(
                    f"{merged:.1%} of tokens were read together with others, and {off:.1%} of "
                    f"tokens may have arrived over {bound:g} ms before their read's stamp (the "
                    f"event loop's iterations and its lag, over {bound:g} ms for {lag_over:.1%} "
                    "of probe samples): more than 1% of token stamps may be off"
                )
            if first_off > 0.01:
                reasons.append(
                    f"{first_merged:.1%} of requests' first tokens were read together with "
                    f"later ones, and {first_off:.1%} may have arrived over {bound:g} ms before "
                    "their read's stamp: more than 1% of TTFTs may be off"
                )
        elif lag99 > bound:
            reasons.append(
                f"event-loop lag p99 {lag99:.2f} ms exceeds {bound:g} ms: "
                "the generator was too busy to stamp arrivals accurately"
            )
        if disp99 > v.max_dispatch_delay_p99_ms:
            reasons.append(
                f"dispatch delay p99 {disp99:.2f} ms exceeds {v.max_dispatch_delay_p99_ms:g} ms: "
                "requests left later than scheduled"
            )
        if work_s > 0 and busy_s / work_s > CPU_BUSY_SHARE:
            reasons.append(
                f"generator CPU at or above {v.max_cpu_percent:g}% while it was late (loop lag "
                f"p99 over {bound:g} ms or a send over {v.max_dispatch_delay_p99_ms:g} ms late) "
                f"for {busy_s:.1f} of the {work_s:.1f} s it had work"
            )
        late = [
            (s, c)
            for s, c in zip(self.seconds, self.cause_seconds, strict=True)
            if s.work and _late(s, v)
        ]
        late_s = sum(s.wall_s for s, _ in late)
        if reasons:  # name what held it back (loadgen/engine/lateness.py)
            reasons.append(name_cause([c for _, c in late], late_s))
        health = {
            "late_s": late_s,
            **{f"late_{k}": ms for k, ms in late_totals([c for _, c in late]).items()},
            "cpu_busy_late_s": busy_s,
            "work_s": work_s,
            "loop_lag_p99_ms": lag99,
            "loop_lag_max_ms": self.lag.total.max,
            "tokens_read_together_share": merged,
            "first_tokens_read_together_share": first_merged,
            "tokens_possibly_off_share": off,
            "first_tokens_possibly_off_share": first_off,
            "loop_lag_over_bound_share": lag_over,
            "kernel_stamps": 1.0 if self.kernel_stamped else 0.0,
            "dispatch_delay_p99_ms": disp99,
            "dispatch_delay_max_ms": self.dispatch_all.max,
            "cpu_percent_max": max(self.cpu_ticks, default=0.0),
        }
        return not reasons, reasons, health

    def cpu_busy_seconds(self, v: ValiditySpec) -> tuple[float, float]:
        """(seconds the generator was CPU-bound *and* late, seconds it had work), each tick
        weighted by its length. CPU alone is a cause, not evidence: a closed loop against a
        server that refuses at once spins at full CPU and still sends on time and stamps
        exactly; only when it was also late did the generator shape the numbers. Weighting by
        length keeps a shard's last, sub-millisecond tick (CPU% of teardown work) from
        counting as a whole saturated second."""
        busy = work = 0.0
        for s in self.seconds:
            if not s.work:
                continue
            work += s.wall_s
            if s.cpu >= v.max_cpu_percent and _late(s, v):
                busy += s.wall_s
        return busy, work


def _possibly_off(off: int, if_late: int, of: int, late_share: float) -> float:
    """The share of `of` stamps that may be off by over the bound: those whose read's spread
    says so, and those that are only if the loop woke late, at most as often as it was late."""
    if of == 0:
        return 0.0
    return off / of + min(if_late / of, late_share)


def _late(s: Second, v: ValiditySpec) -> bool:
    """The second's loop lag p99 or a send in it was over its bound."""
    return s.lag_p99_ms > v.max_loop_lag_p99_ms or s.dispatch_max_ms > v.max_dispatch_delay_p99_ms
