"""A writer in its own process, for the kill test: `python -m tests.workers.store._writer_proc
URL RUN_ID N SPOOL_DIR` writes N deterministic records (and 3 ticks) in one batch and closes.
With PEAKLOAD_TEST_PAUSE_BEFORE_COMMIT set it sits inside the transaction, COPY and INSERT done,
before COMMIT: the moment the test kills it."""

from __future__ import annotations

import sys

from loadgen.records import Batch
from tests.workers.store._records import make_records, make_ticks
from workers.store.writer import StoreWriter


def main() -> None:
    url, run_id, n, spool_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    writer = StoreWriter(url, run_id, spool_dir=spool_dir, batch_max_rows=n + 3)
    writer.write(Batch(make_records(run_id, n), make_ticks(run_id, 3)))
    writer.close()


if __name__ == "__main__":
    main()
