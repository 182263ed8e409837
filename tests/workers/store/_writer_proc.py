"""A writer in its own process, for the kill test: `python -m tests.workers.store._writer_proc
URL RUN_ID N SPOOL_DIR PAUSE_S` writes N deterministic records (and 3 ticks) in one batch and
closes. With PAUSE_S > 0 it sits inside the transaction that long, COPY and INSERT done, before
COMMIT: the moment the test kills it."""

from __future__ import annotations

import sys

from loadgen.results.records import Batch
from tests.workers.store._records import make_records, make_ticks
from workers.store.writer import StoreWriter, WriterConfig


def main() -> None:
    url, run_id, n, spool_dir, pause_s = sys.argv[1:6]
    config = WriterConfig(
        spool_dir=spool_dir, batch_max_rows=int(n) + 3, pause_before_commit_s=float(pause_s)
    )
    writer = StoreWriter(url, run_id, config)
    writer.write(Batch(make_records(run_id, int(n)), make_ticks(run_id, 3)))
    writer.close()


if __name__ == "__main__":
    main()
