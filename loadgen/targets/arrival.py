"""How early the bytes of a connection's kernel-stamped read can have arrived: the evidence one
connection keeps between its reads (see `StreamEvent.spread_ns`).

The kernel stamps a read with its last segment's arrival. Its first bytes came no earlier than
the socket was last drained (the previous read, or the request's send), and, while the socket
is read continuously on a plain TCP connection, no earlier than the event loop's own record of
its selector calls allows (`loopwatch`): both if the loop was woken on time and at all. A read
that may have left bytes behind (it filled the read buffer) drains nothing, and reading paused
and resumed leaves only the drain as a bound. The kernel's count of data segments received
says, with the count of reads, whether every read of a response held exactly one segment
(`tcpinfo`): then the events of each read arrived together, at its stamp.
"""

from __future__ import annotations

from loadgen.targets.loopwatch import LoopWatch

ReadBounds = tuple[int, int, int]  # (stamp, earliest arrival if woken on time, at all; -1: none)


class Arrival:
    __slots__ = ("drained", "drained_each", "reads", "segments_at_send", "watch")

    def __init__(self) -> None:
        self.drained = 0  # clock at the latest read (or the send): lower bound of the next
        self.watch: LoopWatch | None = None  # the loop's record, while it can bound reads
        self.reads = 0  # reads since the request was sent
        self.segments_at_send = -1  # data segments received before it (-1: not known)
        self.drained_each = True  # every read since drained the socket

    def sent(self, at_ns: int, watch: LoopWatch | None, segments_before: int | None) -> None:
        """A request was written at `at_ns`: its response's reads are bounded from here."""
        self.drained, self.watch, self.reads, self.drained_each = at_ns, watch, 0, True
        self.segments_at_send = -1 if segments_before is None else segments_before

    def read(self, stamp: int, now: int, full: bool) -> ReadBounds:
        """A read at `now` (runner's clock) whose kernel stamp converts to `stamp` (-1: none, the
        read is stamped `now`); `full`: it filled the buffer, so bytes may be left behind."""
        self.reads += 1
        drained = self.drained
        if full:
            self.watch, self.drained_each = None, False
        else:
            self.drained = now
        if stamp < 0:
            return now, -1, -1
        t = stamp if stamp > drained else drained
        lw = self.watch
        if lw is None:
            return t, drained, drained
        lo, lo_any = lw.floors(drained)
        if lo_any > t:  # the loop's record and the stamp disagree: the drain only
            return t, drained, drained
        if lo > t:  # the bytes came before the loop's wake-up: it was late
            return t, lo_any, lo_any
        return t, lo, lo_any

    def one_segment_each(self, segments_now: int | None) -> bool:
        """Every read since the send held exactly one data segment, given the kernel's count of
        data segments received now (None: not known)."""
        if segments_now is None or self.segments_at_send < 0 or not self.drained_each:
            return False
        return segments_now - self.segments_at_send == self.reads
