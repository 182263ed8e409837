"""The loop-lag probe measures while a read may come: with `busy` it disarms its timerfd at the
first instant it finds the shard idle and a request going out (`Shard.track`) arms it again. An
idle shard's instants cost its host a wake-up every 5 ms and measure no stamp (64 shards on 2
cores: 1.37 cores between them; bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.engine import lagprobe
from loadgen.engine.lagprobe import LoopLagProbe
from loadgen.engine.timer import PeriodicTimerFd
from tests.loadgen.test_runner import ScriptedTarget, make_plan, run


@pytest.fixture(autouse=True)
def _timerfd() -> None:
    timer = PeriodicTimerFd.open(time.perf_counter_ns() + 10**9, 10**6)
    if timer is None:
        pytest.skip("no timerfd on this system: the fallback thread ticks whatever `busy` says")
    timer.close()


def test_an_idle_probe_pauses_and_a_request_wakes_it() -> None:
    async def main() -> tuple[int, int, int, bool, int]:
        busy = True
        probe = LoopLagProbe(time.perf_counter_ns, busy=lambda: busy)
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(0.1)
        busy_samples = len(probe.second)  # an instant every 5 ms while busy
        busy = False
        await asyncio.sleep(0.05)  # the first instant after this pauses it
        paused, at_pause = probe.paused, len(probe.second)
        await asyncio.sleep(0.2)
        idle_samples = len(probe.second) - at_pause
        busy = True
        probe.wake()
        woken = not probe.paused
        await asyncio.sleep(0.1)
        task.cancel()
        return busy_samples, idle_samples, len(probe.second) - at_pause, paused and woken, at_pause

    busy_samples, idle_samples, after_wake, paused_then_woken, at_pause = asyncio.run(main())
    assert busy_samples >= 5, busy_samples
    assert paused_then_woken
    assert idle_samples == 0  # disarmed: not one wake-up while idle
    assert after_wake >= 5, after_wake
    assert at_pause >= busy_samples


def test_without_busy_the_probe_never_pauses() -> None:
    async def main() -> tuple[bool, int]:
        probe = LoopLagProbe(time.perf_counter_ns)
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(0.2)
        task.cancel()
        return probe.paused, len(probe.second)

    paused, samples = asyncio.run(main())
    assert not paused and samples >= 10, samples


class _Counted:
    """Counts the probe's samples (each a call of `_sample`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = LoopLagProbe._sample

        def counted(probe: LoopLagProbe, now: int, due: int) -> None:
            self.n += 1
            real(probe, now, due)

        monkeypatch.setattr(lagprobe.LoopLagProbe, "_sample", counted)


def test_an_open_loop_shard_probes_while_its_requests_are_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2 requests a second of about 45 ms each for 2 s: the probe samples during the requests
    (and up to an instant after each), a few dozen instants, not the 400 of a probe that ticks
    through the idle time between them (a timerfd counts every instant, however late the loop
    takes them: 400 on any host; 200 would need each request to last 250 ms)."""
    samples = _Counted(monkeypatch)
    plan = make_plan({"rate": [2.0], "arrival": "constant", "duration_s": 2.0})
    result, sink = run(plan, ScriptedTarget(ttft_s=0.02, itl_s=0.005, tokens=5))
    assert result.status == "completed" and len(sink.records) == 4
    assert 4 <= samples.n <= 200, samples.n


def test_a_closed_loop_user_thinking_keeps_the_probe_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A closed-loop user is in flight through its think time (its next send is its own): the
    probe measures throughout, as before."""
    samples = _Counted(monkeypatch)
    plan = make_plan({"concurrency": [1], "think_time_s": 0.5, "duration_s": 1.5})
    result, _ = run(plan, ScriptedTarget(ttft_s=0.02, itl_s=0.005, tokens=5))
    assert result.status == "completed"
    assert samples.n >= 150, samples.n  # 1.5 s of 5-ms instants: 300 on an idle host
