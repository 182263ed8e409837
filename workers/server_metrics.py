"""Stores what `loadgen.targets.prometheus` scrapes from a target's metrics endpoint into the
`server_metrics` table, in small COPY batches from a worker thread (never on the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from datetime import UTC, datetime

import psycopg
from psycopg.types.json import Jsonb

from loadgen.engine.plan import ShardPlan
from loadgen.targets.prometheus import Sample, scrape_loop
from workers.store.connect import pg_connect
from workers.store.runs import public_target_url

FLUSH_EVERY_S = 5.0
SCRAPE_INTERVAL_S = 1.0
SCRAPER_KEY = "scrape_metrics"  # in ShardPlan.extra: this shard's worker scrapes for the run


def with_metrics_scraper(plans: list[ShardPlan], metrics_url: str | None) -> list[ShardPlan]:
    """Name one shard (the first) the run's scraper: one series per run, not one per shard,
    so the server is not polled N times and the store holds no duplicates to reconcile."""
    if not metrics_url or not plans:
        return plans
    first = dataclasses.replace(plans[0], extra={**plans[0].extra, SCRAPER_KEY: True})
    return [first, *plans[1:]]


def insert_samples(url: str, run_id: str, source: str, samples: list[Sample]) -> None:
    """Append samples for `run_id` (one transaction)."""
    if not samples:
        return
    with (
        pg_connect(url) as conn,
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
        # wall_anchor = (wall ns, perf_counter_ns) read together; a distributed worker passes
        # the reference clock's wall time, so the series sits on the run's common clock
        self.source = public_target_url(metrics_url)
        self._anchor_wall, self._anchor_mono = wall_anchor
        self._pending: list[Sample] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.stored = 0
        self.failed = 0

    def _wall(self) -> int:
        return self._anchor_wall + (time.perf_counter_ns() - self._anchor_mono)

    def _emit(self, samples: list[Sample]) -> None:
        # Looked up on every scrape: `_flush` swaps in a new list, and a bound
        # `self._pending.extend` would keep filling the old one, never stored.
        self._pending.extend(samples)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                scrape_loop(self.metrics_url, SCRAPE_INTERVAL_S, self._emit, self._wall)
            ),
            asyncio.create_task(self._flusher()),
        ]

    async def _flusher(self) -> None:
        # Stopped by an event, never cancelled: a flush cancelled while its COPY runs in the
        # thread would still store the batch, yet leave it out of `stored`.
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), FLUSH_EVERY_S)
            await self._flush()
        await self._flush()  # what was scraped while the last one ran

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            await asyncio.to_thread(insert_samples, self.db_url, self.run_id, self.source, batch)
            self.stored += len(batch)
        except psycopg.Error:
            self.failed += len(batch)

    async def stop(self) -> None:
        """Stop scraping, then let the flusher store what is left and end."""
        scrapers, flushers = self._tasks[:1], self._tasks[1:]
        for t in scrapers:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._stopping.set()
        for t in flushers:
            await t
        if not flushers:
            await self._flush()
