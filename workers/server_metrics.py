"""Stores what `loadgen.prometheus` scrapes from a target's metrics endpoint into the
`server_metrics` table, in small COPY batches from a worker thread (never on the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import psycopg
from psycopg.types.json import Jsonb

from loadgen.prometheus import Sample, scrape_loop
from workers.store.runs import public_target_url

FLUSH_EVERY_S = 5.0
SCRAPE_INTERVAL_S = 1.0


def insert_samples(url: str, run_id: str, source: str, samples: list[Sample]) -> None:
    """Append samples for `run_id` (one transaction)."""
    if not samples:
        return
    with (
        psycopg.connect(url) as conn,
        conn.cursor() as cur,
        cur.copy("COPY server_metrics (t, run_id, source, name, labels, value) FROM STDIN") as cp,
    ):
        for s in samples:
            cp.write_row((_ts(s.t_ns), run_id, source, s.name, Jsonb(s.labels), s.value))


def _ts(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


class MetricsRecorder:
    """Scrape `metrics_url` during a run and store the samples; `stop()` flushes the rest.
    Storage failures are counted, not raised: server metrics are evidence, not the ledger."""

    def __init__(
        self, db_url: str, run_id: str, metrics_url: str, wall_anchor: tuple[int, int]
    ) -> None:
        self.db_url = db_url
        self.run_id = run_id
        self.metrics_url = metrics_url
        self.source = public_target_url(metrics_url)
        self._anchor_wall, self._anchor_mono = wall_anchor
        self._pending: list[Sample] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.stored = 0
        self.failed = 0

    def _wall(self) -> int:
        return self._anchor_wall + (time.perf_counter_ns() - self._anchor_mono)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                scrape_loop(self.metrics_url, SCRAPE_INTERVAL_S, self._pending.extend, self._wall)
            ),
            asyncio.create_task(self._flusher()),
        ]

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            await self._flush()

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            await asyncio.to_thread(insert_samples, self.db_url, self.run_id, self.source, batch)
            self.stored += len(batch)
        except psycopg.Error:
            self.failed += len(batch)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self._flush()
