"""An in-memory Sink for runner tests (the store writer is tested against real databases)."""

from __future__ import annotations

from loadgen.results.records import Batch, RequestRecord, Tick


class MemorySink:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.ticks: list[Tick] = []
        self.closed = False

    def write(self, batch: Batch) -> None:
        self.records.extend(batch.records)
        self.ticks.extend(batch.ticks)

    def close(self) -> None:
        self.closed = True


def ledger(records: list[RequestRecord], scheduled: int) -> None:
    """The ledger check: every scheduled request exactly one terminal record, no duplicates."""
    ids = [r.request_id for r in records]
    assert len(ids) == len(set(ids)), "duplicate request ids"
    assert len(records) == scheduled, f"{len(records)} records for {scheduled} scheduled requests"
    assert sorted(r.index for r in records) == list(range(scheduled))
