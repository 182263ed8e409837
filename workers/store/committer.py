"""The store writer's database side: one connection (reconnected with backoff), and committing
one encoded batch per transaction, straight into the tables or idempotently through staging.
Used by workers/store/writer.py's database thread only.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from workers.store import batchsql
from workers.store.spool import EncodedBatch
from workers.store.writer_stats import WriterStats

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.25, 5.0


class Lost(Exception):
    """The connection broke (or timed out) mid-transaction: the batch is not known committed."""


class Rejected(Exception):
    """The database refused the batch for good (not an outage): replaying it cannot help."""


class Committer:
    """Commits batches to the store at `url`, counting into `stats`."""

    def __init__(
        self,
        url: str,
        stats: WriterStats,
        *,
        application_name: str,
        connect_timeout_s: int,
        io_timeout_s: float,
        direct_copy: bool,
        pause_s: float = 0.0,
    ) -> None:
        self.url, self.stats = url, stats
        self.application_name, self.connect_timeout_s = application_name, connect_timeout_s
        self.io_timeout_s, self.direct_copy, self.pause_s = io_timeout_s, direct_copy, pause_s
        self.conn: psycopg.Connection[Any] | None = None
        self.blocks = False  # the store has request_blocks (deploy/sql/0110)
        self.next_connect = 0.0  # perf_counter seconds
        self.backoff = BACKOFF_MIN_S

    def connected(self) -> bool:
        """A live connection, reconnecting (with backoff) when due; False when not available."""
        if self.conn is not None and not self.conn.closed:
            return True
        if time.perf_counter() < self.next_connect:
            return False
        try:
            self.conn, self.blocks = batchsql.connect_writer(
                self.url, self.connect_timeout_s, self.application_name
            )
        except psycopg.Error as e:
            self.stats.connect_failures += 1
            self.stats.last_error = f"connect: {str(e).strip()[:300]}"
            self._schedule_retry()
            return False
        self.backoff = BACKOFF_MIN_S
        return True

    def _schedule_retry(self) -> None:
        self.next_connect = time.perf_counter() + self.backoff
        self.backoff = min(BACKOFF_MAX_S, self.backoff * 2)

    def _lost(self) -> Lost:
        """The connection is given up and a new one scheduled; the batch's outcome unknown."""
        self.drop()
        self._schedule_retry()
        return Lost()

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # already broken: nothing to release
                self.stats.last_error = self.stats.last_error or "close failed"
            self.conn = None

    def commit(self, enc: EncodedBatch, *, replay: bool = False) -> bool:
        """One transaction per batch (call only when `connected()`). A first attempt COPYs
        straight into the tables (the cheapest path for the server); if any row already exists,
        that transaction is rolled back and the batch goes through the idempotent path: COPY
        into TEMP staging, then INSERT ... ON CONFLICT DO NOTHING. Spool replays (`replay`)
        always take the idempotent path. Returns True once committed. Raises Lost on a
        connection problem (the batch must be kept), Rejected on any other database error."""
        conn = self.conn
        assert conn is not None
        watchdog = threading.Timer(self.io_timeout_s, batchsql.shutdown_socket, (conn,))
        watchdog.daemon = True
        watchdog.start()

        def write(staged: bool) -> tuple[int, int]:
            return batchsql.write_batch(
                conn, enc, staged=staged, pause_s=self.pause_s, with_blocks=self.blocks
            )

        try:
            counts: tuple[int, int] | None = None
            if self.direct_copy and not replay:
                try:
                    counts = write(staged=False)
                except psycopg.errors.UniqueViolation:
                    self.stats.direct_fallbacks += 1
            if counts is None:
                counts = write(staged=True)
        except psycopg.Error as e:
            self.stats.last_error = str(e).strip()[:300]
            if conn.closed or conn.broken or isinstance(e, psycopg.OperationalError):
                raise self._lost() from e
            raise Rejected(str(e)) from e
        except Exception as e:
            if not raised_by_the_driver(e):
                raise
            # the driver lost track of the wire (seen: a pooler answering a COPY's end with
            # more than one result while its database restarted): the connection is unusable
            # and the batch's outcome unknown
            self.stats.last_error = f"driver: {e!r}"[:300]
            raise self._lost() from e
        finally:
            watchdog.cancel()
        inserted, ticks_inserted = counts
        self.stats.batches_committed += 1
        self.stats.rows_inserted += inserted
        self.stats.rows_duplicate += enc.n_records - inserted
        self.stats.ticks_inserted += ticks_inserted
        return True


def raised_by_the_driver(e: BaseException) -> bool:
    """Whether `e` (not a psycopg.Error) was raised inside psycopg's own code: the innermost
    frame of its traceback is one of psycopg's modules."""
    tb, module = e.__traceback__, ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return module == "psycopg" or module.startswith("psycopg.")
