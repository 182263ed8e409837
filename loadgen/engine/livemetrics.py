"""A running measurement's progress as Prometheus metrics (`--metrics-port`): `LiveMetrics` owns
one registry and its HTTP server thread (prometheus_client's); `MetricsSink` wraps a run's sink
and feeds the registry from the very batches the sink stores, so a scrape counts what the store
holds. Instruments, names and values: loadgen.results.genai.

The event loop only hands each batch over (a queue put); a thread of this module turns records
into observations, so a scrape or a heavy batch never delays a send.

Several measuring processes (`peakload run --processes N`): each counts into prometheus_client's
multiprocess files in one folder (`children_dir`, named to them by PROMETHEUS_MULTIPROC_DIR
when they are spawned), and the parent serves the sum of those files instead of its own counts.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loadgen.engine import scrape_server
from loadgen.engine.plan import Sink
from loadgen.errors import MetricsError
from loadgen.results import genai
from loadgen.results.records import Batch, RequestRecord, Tick

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_LINGER_S = 15.0  # Prometheus's default scrape interval: one final scrape fits


class _Source:
    """A collector yielding what the LiveMetrics' current source holds (its own counts, or
    its measuring processes' files)."""

    def __init__(self, owner: LiveMetrics) -> None:
        self.owner = owner

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        return self.owner.source.collect()


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client reads it when first imported


class LiveMetrics:
    """One process's registry of run metrics, served on `host:port` (0: a free port, read
    `port` after `start`). In a process spawned with PROMETHEUS_MULTIPROC_DIR set, the counts
    go to that folder's files (the parent serves them: `children_dir`). With `keep_runs`, a
    long-lived process (a worker) keeps the series of only that many ended runs: an older
    run's are removed once its successors end (the scrapes have had them meanwhile)."""

    def __init__(self, keep_runs: int | None = None) -> None:
        self.keep_runs = keep_runs
        self._series: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}  # run: (metric, labels)
        self._ended: list[str] = []  # oldest first
        self.registry = CollectorRegistry(auto_describe=False)  # what is served
        self.scrapes = scrape_server.ScrapeLog()
        self.counts = CollectorRegistry(auto_describe=False)  # this process's own
        self.source: Any = self.counts
        self.registry.register(_Source(self))  # type: ignore[arg-type]
        self.port: int | None = None
        self.host = DEFAULT_HOST
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._children: str | None = None
        labels = genai.REQUESTS.label_names
        self.requests = Counter(
            genai.REQUESTS.prometheus_name, genai.REQUESTS.description, labels,
            registry=self.counts,
        )  # fmt: skip
        self.in_flight = Gauge(
            genai.IN_FLIGHT.prometheus_name, genai.IN_FLIGHT.description,
            genai.IN_FLIGHT.label_names, registry=self.counts,
            multiprocess_mode="sum",  # measuring processes: their regions' shards add up
        )  # fmt: skip
        self.histograms: dict[genai.Instrument, Histogram] = {
            inst: Histogram(
                inst.prometheus_name,
                inst.description,
                inst.label_names,
                buckets=inst.buckets,
                registry=self.counts,
            )
            for inst in genai.HISTOGRAMS
        }
        self._lock = threading.Lock()
        self._shard_in_flight: dict[tuple[str, str, str], int] = {}  # (run, region, shard)

    def start(self, port: int, host: str = DEFAULT_HOST) -> int:
        """Listen on `host:port` in a daemon thread; returns the port (the one picked for 0).
        Raises MetricsError naming the address when it cannot bind."""
        try:
            self._server, self._thread = scrape_server.serve(
                self.registry, host, port, self.scrapes
            )
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise MetricsError(
                f"--metrics-port {port} on {host}: cannot listen: {reason}"
            ) from None
        self.host, self.port = host, int(self._server.server_port)
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def children_dir(self) -> str:
        """A new folder for measuring processes' counts (pass it to them as
        PROMETHEUS_MULTIPROC_DIR when spawning them); from now on this serves their sum, not
        its own counts. Removed by `stop`."""
        from prometheus_client import multiprocess

        self._children = tempfile.mkdtemp(prefix="peakload-metrics-")
        children = CollectorRegistry(auto_describe=False)
        multiprocess.MultiProcessCollector(children, path=self._children)  # type: ignore[no-untyped-call]
        self.source = children
        return self._children

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._children is not None:
            shutil.rmtree(self._children, ignore_errors=True)
            self._children = None

    def add_records(self, records: list[RequestRecord]) -> None:
        obs = genai.observe(records)
        for ended, n in obs.requests.items():
            self._note(self.requests, ended)
            self.requests.labels(*ended).inc(n)
        for (inst, labels), values in obs.arrays().items():
            self._note(self.histograms[inst], labels)
            _observe_many(self.histograms[inst].labels(*labels), inst.buckets, values)

    def _note(self, metric: Any, labels: tuple[str, ...]) -> None:
        if self.keep_runs is not None:
            with self._lock:
                self._series.setdefault(labels[0], set()).add((metric, labels))

    def add_ticks(self, ticks: list[Tick]) -> None:
        """In flight per run and region: the sum of its shards' latest ticks."""
        with self._lock:
            touched = set()
            for t in ticks:
                self._shard_in_flight[(t.run_id, t.region, t.shard_id)] = t.in_flight
                touched.add((t.run_id, t.region))
            for run_id, region in touched:
                total = sum(
                    n
                    for (r, g, _), n in self._shard_in_flight.items()
                    if (r, g) == (run_id, region)
                )
                self.in_flight.labels(run_id, region).set(total)
                if self.keep_runs is not None:
                    self._series.setdefault(run_id, set()).add((self.in_flight, (run_id, region)))

    def ended(self, run_id: str) -> None:
        """Nothing of `run_id` is in flight any more (its sink closed); with `keep_runs`, the
        oldest ended run beyond that many loses its series."""
        with self._lock:
            for key in [k for k in self._shard_in_flight if k[0] == run_id]:
                self._shard_in_flight[key] = 0
                self.in_flight.labels(key[0], key[1]).set(0)
            if self.keep_runs is None:
                return
            if run_id in self._ended:
                self._ended.remove(run_id)
            self._ended.append(run_id)
            while len(self._ended) > self.keep_runs:
                old = self._ended.pop(0)
                for metric, labels in self._series.pop(old, set()):
                    metric.remove(*labels)
                for key in [k for k in self._shard_in_flight if k[0] == old]:
                    del self._shard_in_flight[key]

    def wait_for_scrape(self, linger_s: float) -> bool:
        """Block (not on an event loop) until a scrape that begins after now is answered
        within the time its scraper waits, at most `linger_s`; True if one was: the scraper
        then holds the final values."""
        return self.scrapes.wait_kept_after(time.perf_counter_ns(), linger_s)


def _observe_many(child: Any, bounds: tuple[float, ...], values: Any) -> None:
    """`child.observe(v)` for every value at once: its per-bucket counts (prometheus_client
    keeps them per bucket, not cumulative, as `_buckets`, with `_sum`) raised once each, as
    observe() would raise them one value at a time; observe() itself if that shape is not
    there."""
    counts = genai.bucket_counts(bounds, values)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if buckets is None or total is None or len(buckets) != len(counts):
        for v in values.tolist():
            child.observe(v)
        return
    for bucket, n in zip(buckets, counts, strict=True):
        if n:
            bucket.inc(n)
    total.inc(float(values.sum()))


_STOP = object()


def counts_to_files() -> bool:
    """Whether this process counts into multiprocess files (it was spawned to)."""
    from prometheus_client import values

    return bool(os.environ.get(MULTIPROC_ENV)) and values.ValueClass is not values.MutexValue


class MetricsSink:
    """A sink that passes every batch on to `sink` and, off the event loop, into `metrics`.
    `close` closes the inner sink, then waits for the feeding thread to finish."""

    def __init__(self, sink: Sink, metrics: LiveMetrics) -> None:
        self.sink, self.metrics = sink, metrics
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._runs: set[str] = set()
        self._thread = threading.Thread(target=self._feed, name="peakload-metrics", daemon=True)
        self._thread.start()

    def write(self, batch: Batch) -> None:
        # copies of the lists (not of the records): the caller may reuse its batch
        self._queue.put((list(batch.records), list(batch.ticks)))
        self.sink.write(batch)

    def close(self) -> None:
        try:
            self.sink.close()
        finally:
            self._queue.put(_STOP)
            self._thread.join()
            for run_id in self._runs:
                self.metrics.ended(run_id)

    def _feed(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            try:
                records, ticks = item
                self._runs.update(r.run_id for r in records)
                self._runs.update(t.run_id for t in ticks)
                self.metrics.add_ticks(ticks)
                self.metrics.add_records(records)
            except Exception:  # a bad record never stops the run; it is stored regardless
                log.exception("live metrics: a batch could not be counted")
