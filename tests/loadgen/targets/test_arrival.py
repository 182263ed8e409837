"""One connection's bounds on when a stamped read's bytes arrived (loadgen/targets/arrival.py),
on set numbers: the drain, the loop's record, a read that filled its buffer, segment counts."""

from __future__ import annotations

from loadgen.targets.arrival import Arrival
from loadgen.targets.loopwatch import LoopWatch

MS = 1_000_000


def _record(prev: tuple[int, int], latest: tuple[int, int], woken_late: int) -> LoopWatch:
    w = LoopWatch()
    (w.prev_entered, w.prev_returned), (w.entered, w.returned) = prev, latest
    w.woken_late, w.could_wait = woken_late, True
    return w


def test_a_read_without_a_kernel_stamp_is_stamped_now_with_no_bound() -> None:
    a = Arrival()
    a.sent(10 * MS, None, 0)
    assert a.read(-1, 12 * MS, full=False) == (12 * MS, -1, -1)


def test_the_drain_bounds_a_read_and_a_stamp_never_precedes_it() -> None:
    a = Arrival()
    a.sent(10 * MS, None, 0)
    assert a.read(15 * MS, 16 * MS, full=False) == (15 * MS, 10 * MS, 10 * MS)
    assert a.read(15 * MS, 20 * MS, full=False) == (16 * MS, 16 * MS, 16 * MS)  # drained at 16


def test_a_full_read_drains_nothing() -> None:
    a = Arrival()
    a.sent(10 * MS, None, 0)
    a.read(15 * MS, 16 * MS, full=True)  # bytes may be left: they came after 10 ms, not 16
    assert a.read(17 * MS, 18 * MS, full=False)[1] == 10 * MS
    assert not a.one_segment_each(2)  # a segment may have been split between the two reads


def test_the_loops_record_narrows_and_a_late_wake_up_falls_back() -> None:
    a = Arrival()
    a.sent(10 * MS, _record((0, 20 * MS), (30 * MS, 45 * MS), woken_late=0), 0)
    assert a.read(44_900_000, 46 * MS, full=False) == (44_900_000, 44_500_000, 44_500_000)
    a = Arrival()
    a.sent(10 * MS, _record((0, 20 * MS), (30 * MS, 45 * MS), woken_late=-1), 0)
    # unmeasured, and the stamp came before the wake-up's floor: it was late, the sure floor
    assert a.read(40 * MS, 46 * MS, full=False) == (40 * MS, 19_500_000, 19_500_000)


def test_one_segment_per_read_by_the_kernels_count() -> None:
    a = Arrival()
    a.sent(10 * MS, None, 7)  # seven data segments before this request
    a.read(11 * MS, 11 * MS, full=False)
    a.read(12 * MS, 12 * MS, full=False)
    assert a.one_segment_each(9)
    assert not a.one_segment_each(10)  # three segments in two reads: one held two
    assert not a.one_segment_each(None)
    a.sent(13 * MS, None, None)  # the count before it is not known
    assert not a.one_segment_each(9)
