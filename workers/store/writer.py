"""The store writer, the `Sink` a runner hands its batches to: `write` only appends; threads
encode and commit batches idempotently, spooling to disk while the database is unreachable or
behind and replaying in order after; a full spool fails the run.
"""

# Batches are bounded by rows and seconds. A first attempt COPYs straight into the tables; a batch
# whose rows may already exist (a replay) goes through TEMP staging tables and INSERT ... ON
# CONFLICT DO NOTHING (workers/store/committer.py, batchsql.py), so it never duplicates. Each
# batch also writes its packed request_blocks row (workers/store/blocks.py) for fast reads.

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import SpoolFullError, StoreError
from loadgen.results.records import Batch
from workers.store import committer, copyenc, embedded
from workers.store.connect import redact_url
from workers.store.spool import EncodedBatch, Spool
from workers.store.writer_stats import LagWindow, WriterStats

log = logging.getLogger(__name__)

APPLICATION_NAME = "peakload-writer"


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """How a StoreWriter batches, spools and waits. The defaults are what runs use; a caller
    sets what is its own (the run's `store_content`, a shard's spool directory)."""

    batch_max_rows: int = 5_000  # a batch is committed at this many rows...
    batch_max_s: float = 0.5  # ...or once its oldest row waited this long
    spool_dir: str | Path | None = None  # None: spool_root() / run_id
    spool_max_bytes: int = 1 << 30  # 1 GiB: about 500k requests of 128 chunks
    store_content: bool = False  # prompts and responses, only when the spec opts in
    io_timeout_s: float = 30.0  # one batch's transaction; past it the socket is shut down
    connect_timeout_s: int = 5  # libpq connect_timeout (whole seconds, at least 2)
    close_timeout_s: float = 60.0  # how long close() keeps retrying a spool backlog
    direct_copy: bool = True  # a first attempt COPYs straight into the tables
    spill_after_s: float = 2.0  # an encoded batch waiting this long for the database is spooled
    pause_before_commit_s: float = 0.0  # tests only: sit in the transaction before COMMIT

    def __post_init__(self) -> None:
        if self.batch_max_rows < 1 or self.batch_max_s <= 0:
            raise StoreError("StoreWriter: batch_max_rows must be >= 1 and batch_max_s > 0")


class _Job:
    """An encoded batch on its way from the encoder thread to the database thread."""

    __slots__ = ("enc", "n_items", "order", "times")

    def __init__(
        self, enc: EncodedBatch, times: list[tuple[int, int]], n_items: int, order: int
    ) -> None:
        self.enc, self.times, self.n_items, self.order = enc, times, n_items, order


_IDLE = _Job(EncodedBatch(b"", b"", 0, 0), [], 0, 0)  # "nothing new": time to retry the spool


class StoreWriter:
    """A `Sink` writing one run's records and ticks to the store at `url`.

    `write` is safe to call from the event loop (it never blocks on I/O); call it from one thread
    at a time. `close` flushes, waits for the writer thread, and raises SpoolFullError if records
    were lost to a full spool, or StoreError if data could not be written (e.g. spool left
    behind). Counters and lag: `stats()`. Lag is measured on the monotonic clock from `write()`
    to the commit of the transaction holding the record.
    """

    def __init__(self, url: str, run_id: str, config: WriterConfig | None = None) -> None:
        cfg = WriterConfig() if config is None else config
        self.url, self.run_id, self.config = url, run_id, cfg
        self.store_content = cfg.store_content
        self.batch_max_rows, self.batch_max_s = cfg.batch_max_rows, cfg.batch_max_s
        self.close_timeout_s, self.spill_after_s = cfg.close_timeout_s, cfg.spill_after_s
        self.connect_timeout_s = max(2, int(cfg.connect_timeout_s))
        root = Path(cfg.spool_dir) if cfg.spool_dir else spool_root() / run_id
        self.spool = Spool(root, cfg.spool_max_bytes)
        self._q: collections.deque[tuple[int, Batch]] = collections.deque()
        self._wake = threading.Event()
        self._done_cv = threading.Condition()
        self._written_seq = 0  # write() calls so far (event-loop thread only)
        self._handled_seq = 0  # write() calls committed or spooled (writer thread only)
        self._rows_in = 0  # rows appended (event-loop thread only)
        self._rows_out = 0  # rows taken (writer thread only)
        self._closing = False
        self._closed = False
        self._spool_times: dict[str, tuple[int, int]] = {}  # file -> (oldest write ns, n)
        self._spool_lock = threading.Lock()  # spooling happens on both threads
        self.stats_ = WriterStats()
        self._db = committer.Committer(
            url,
            self.stats_,
            application_name=APPLICATION_NAME,
            connect_timeout_s=self.connect_timeout_s,
            io_timeout_s=cfg.io_timeout_s,
            direct_copy=cfg.direct_copy,
            pause_s=cfg.pause_before_commit_s,
        )
        self._lags = LagWindow()
        self.error: BaseException | None = None
        # Two threads, so encoding batch N+1 (Python, holds the GIL) overlaps the database
        # working on batch N (the GIL is released while psycopg waits on the socket).
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=2)
        self._encoder = threading.Thread(
            target=self._encode_main, name=f"store-encode-{run_id[:8]}", daemon=True
        )
        self._thread = threading.Thread(
            target=self._db_main, name=f"store-writer-{run_id[:8]}", daemon=True
        )
        self._encoder.start()
        self._thread.start()

    # ------------------------------------------------------------------ the hot path

    def write(self, batch: Batch) -> None:
        """Hand a batch to the writer thread (an append; never blocks on the database)."""
        if self._closing:
            raise StoreError("StoreWriter.write after close()")
        self._q.append((time.perf_counter_ns(), batch))
        self._written_seq += 1
        self._rows_in += len(batch)
        self.stats_.records_received += len(batch.records)
        self.stats_.ticks_received += len(batch.ticks)
        if self._rows_in - self._rows_out >= self.batch_max_rows:
            self._wake.set()

    # ------------------------------------------------------------------ control

    @property
    def failed(self) -> bool:
        """True once records could not be kept (spool full, or rejected by the database)."""
        return self.error is not None

    def stats(self) -> WriterStats:
        """A snapshot of the counters, with lag p50/max (seconds) over recent commits."""
        return self.stats_.snapshot(self._lags, len(self.spool))

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until every batch written so far is committed or spooled. False on timeout."""
        target = self._written_seq
        self._wake.set()
        deadline = time.perf_counter() + timeout_s
        with self._done_cv:
            while self._handled_seq < target and self._thread.is_alive():
                left = deadline - time.perf_counter()
                if left <= 0:
                    return False
                self._done_cv.wait(min(left, 0.1))
        return self._handled_seq >= target

    def close(self) -> None:
        """Flush, replay the spool (retrying up to close_timeout_s), stop the thread; raise if
        anything was lost or left behind. Idempotent."""
        if not self._closed:
            self._closing = True
            self._wake.set()
            self._encoder.join()
            self._thread.join()
            self._closed = True
            self.spool.close()
        if self.error is not None:
            if isinstance(self.error, StoreError):
                raise self.error
            raise StoreError(f"store writer failed: {self.error!r}") from self.error
        left = self.spool.files()
        if left:
            raise StoreError(
                f"the store at {redact_url(self.url)} stayed unreachable: {len(left)} batches "
                f"remain spooled in {self.spool.dir}; the next StoreWriter for run {self.run_id} "
                f"replays them"
            )

    # ------------------------------------------------------------------ the writer thread

    def _encode_main(self) -> None:
        try:
            while (items := self._take()) is not None:
                job = self._encode(items)
                if job is None:
                    continue
                try:
                    self._jobs.put(job, timeout=self.spill_after_s)
                except queue.Full:
                    # The database is behind: keep the backlog on disk, not in memory. The
                    # writer thread replays it in order (new batches queue behind it).
                    self._spool_job(job)
        except BaseException as e:  # surfaced by close()
            self._fail(StoreError(f"store writer (encoder) crashed: {e!r}"))
            self._closing = True
            while self._q:  # nothing more will be taken: count it lost, release flush()
                self.stats_.records_lost += len(self._q.popleft()[1].records)
        finally:
            self._jobs.put(None)

    def _db_main(self) -> None:
        got_end = False  # the encoder's final None was received
        try:
            if len(self.spool):
                self._replay()
            while True:
                try:
                    job = self._jobs.get(timeout=0.25 if len(self.spool) else None)
                except queue.Empty:
                    job = _IDLE
                if job is None:
                    got_end = True
                    break
                if job is not _IDLE:
                    self._deliver(job)
                if len(self.spool) and time.perf_counter() >= self._db.next_connect:
                    got_end = self._queue_to_spool()  # older queued batches keep their place
                    self._replay()
                    if got_end:
                        break
            deadline = time.perf_counter() + self.close_timeout_s
            while len(self.spool) and time.perf_counter() < deadline:
                self._replay()
                if len(self.spool):
                    time.sleep(min(self._db.backoff, max(0.0, deadline - time.perf_counter())))
        except BaseException as e:  # surfaced by close(); where it came from, logged here
            log.exception("store writer of run %s crashed", self.run_id)
            self._fail(StoreError(f"store writer crashed: {e!r}"))
        finally:
            self._drop_conn()
            if not got_end:  # after a crash: let the encoder finish its puts
                while (job := self._jobs.get()) is not None:
                    self.stats_.records_lost += job.enc.n_records
            with self._done_cv:
                self._handled_seq = max(self._handled_seq, self._written_seq)
                self._done_cv.notify_all()

    def _take(self) -> list[tuple[int, Batch]] | None:
        """Wait for a full batch, the oldest item's time bound, or close. Returns the items to
        write, or None once closed and drained."""
        max_ns = int(self.batch_max_s * 1e9)
        while True:
            if self._q:
                age_ns = time.perf_counter_ns() - self._q[0][0]
                rows = self._rows_in - self._rows_out
                if rows >= self.batch_max_rows or age_ns >= max_ns or self._closing:
                    break
                wait_s = (max_ns - age_ns) / 1e9
            elif self._closing:
                return None
            else:
                wait_s = self.batch_max_s
            self._wake.wait(min(wait_s, 0.25))
            self._wake.clear()
        items: list[tuple[int, Batch]] = []
        rows = 0
        while self._q and rows < self.batch_max_rows:
            item = self._q.popleft()
            items.append(item)
            rows += len(item[1])
        self._rows_out += rows
        return items

    def _encode(self, items: list[tuple[int, Batch]]) -> _Job | None:
        records = [r for _, b in items for r in b.records]
        ticks = [t for _, b in items for t in b.ticks]
        try:
            req, blk = copyenc.encode_batch(records, self.store_content) if records else (b"", b"")
            enc = EncodedBatch(
                req, copyenc.encode_ticks(ticks) if ticks else b"", len(records), len(ticks), blk
            )
        except copyenc.EncodeError as e:
            self.stats_.records_lost += len(records)
            self._fail(StoreError(f"a batch of run {self.run_id} cannot be stored: {e}"))
            self._mark_handled(len(items))
            return None
        times = [(t, len(b.records)) for t, b in items]
        return _Job(enc, times, len(items), self.spool.reserve())

    def _deliver(self, job: _Job) -> None:
        enc = job.enc
        if not len(self.spool) and self._connected():
            try:
                if self._commit(enc):
                    self._lags.add_batch(job.times, time.perf_counter_ns())
                self._mark_handled(job.n_items)
                return
            except committer.Lost:  # its outcome is unknown: the replay must be idempotent
                self._spool_job(job, fresh=False)
                return
        self._spool_job(job)

    def _spool_job(self, job: _Job, *, fresh: bool = True) -> None:
        """Keep a batch on disk for replay (or, on a full spool, fail the run and count it).
        `fresh`: never attempted, so its replay may take the direct COPY path."""
        with self._spool_lock:
            try:
                path = self.spool.put(job.enc, job.order, fresh=fresh)
                self._spool_times[path.name] = (job.times[0][0], job.enc.n_records)
                self.stats_.spooled_batches += 1
            except SpoolFullError as e:
                self.stats_.records_lost += job.enc.n_records
                self._fail(e)
        self._mark_handled(job.n_items)

    def _queue_to_spool(self) -> bool:
        """Spool every batch waiting in the queue (they may be older than spooled ones, and the
        spool replays by encoding order). True when the encoder's final None was among them."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                return True
            self._spool_job(job)

    def _replay(self) -> None:
        """Commit spooled batches in order while the database answers."""
        for path in self.spool.files():
            if not self._connected():
                return
            try:
                batch = self.spool.read(path)
                committed = self._commit(batch, replay=not self.spool.is_fresh(path))
            except committer.Lost:
                return
            if not committed:  # rejected for good: kept for inspection, never replayed
                self.spool.set_aside(path)
                continue
            self.spool.remove(path)
            self.stats_.replayed_batches += 1
            oldest, n = self._spool_times.pop(path.name, (0, 0))
            if n:
                self._lags.add(time.perf_counter_ns() - oldest, n)

    def _mark_handled(self, n: int) -> None:
        with self._done_cv:
            self._handled_seq += n
            self._done_cv.notify_all()

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error

    # ------------------------------------------------------------------ the database

    def _connected(self) -> bool:
        return self._db.connected()

    def _drop_conn(self) -> None:
        self._db.drop()

    def _commit(self, enc: EncodedBatch, *, replay: bool = False) -> bool:
        """Commit one batch (workers/store/committer.py). Raises committer.Lost when its outcome is
        unknown (the batch must be kept); a rejected batch fails the writer, counts its records
        as lost and returns False."""
        try:
            return self._db.commit(enc, replay=replay)
        except committer.Rejected as e:
            self.stats_.records_lost += enc.n_records
            self.stats_.rejected_batches += 1
            self._fail(StoreError(f"the store rejected a batch of run {self.run_id}: {e}"))
            return False


def spool_root() -> Path:
    """Where writers spool by default: one subdirectory per run under the data directory."""
    return embedded.data_home() / "spool"


def replay_spools(url: str, root: Path | None = None) -> dict[str, int]:
    """Replay every batch left under `root` (default `spool_root()`) by writers that are gone,
    run by run. Returns {run_id: batches replayed}; raises StoreError if some remain."""
    root = root or spool_root()
    done: dict[str, int] = {}
    if not root.is_dir():
        return done
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if not any(run_dir.glob("w-*/*.batch")):
            continue
        writer = StoreWriter(url, run_dir.name, WriterConfig(spool_dir=run_dir))
        writer.close()
        done[run_dir.name] = writer.stats().replayed_batches
    return done
