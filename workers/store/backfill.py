"""Packing a run stored without request_blocks (written before deploy/sql/0110, or generated
in SQL): its rows are read back and packed by the writer's own encoder, in blocks of the
writer's batch size, replacing any blocks the run had, in one transaction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.results.records import Outcome, Phase, RequestRecord, TokenSource
from loadgen.results.storeformat import READ_COLUMNS
from workers.store import blocks, copyenc
from workers.store.batchsql import COPY_DIRECT_BLOCKS
from workers.store.connect import pg_connect

# each `requests` column the readers load (loadgen.results.storeformat.READ_COLUMNS), as it is
# read back for the record: ids as text, scheduled_at as µs since the Unix epoch
_SELECT = {
    "request_id": "request_id::text",
    "run_id": "run_id::text",
    "scheduled_at": "(extract(epoch FROM scheduled_at) * 1000000)::int8",
}
_COLUMNS = tuple(_SELECT.get(c, c) for c in READ_COLUMNS)
_FIELDS = {"idx": "index", "scheduled_at": "scheduled_at_ns"}  # the rest: named as the column


def _record(row: tuple[Any, ...]) -> RequestRecord:
    # resent is NULL on rows written before deploy/sql/0120 (not recorded): kept None, not 0,
    # so the block says what the row says
    value = dict(zip(READ_COLUMNS, row, strict=True))
    value["scheduled_at"] *= 1000
    value["phase"] = Phase(value["phase"])
    value["outcome"] = Outcome(value["outcome"])
    value["token_source"] = TokenSource(value["token_source"])
    return RequestRecord(**{_FIELDS.get(c, c): v for c, v in value.items()})


def pack_run(url: str, run_id: str, *, batch_rows: int = 5_000) -> int:
    """Write request_blocks for every row of the run (ordered by scheduled time), replacing
    the run's blocks. Returns the number of blocks written. Rows whose two chunk arrays differ
    in length, with `n > 1` chunk_choices or with audio, cannot be packed: then no block is kept and
    readers use `requests`."""
    select = "SELECT " + ", ".join(_COLUMNS) + " FROM requests WHERE run_id = %s::uuid"
    written = 0
    with pg_connect(url) as read, pg_connect(url) as write, write.transaction():
        write.execute("DELETE FROM request_blocks WHERE run_id = %s::uuid", (run_id,))
        choices = read.execute(  # n > 1 (0190), audio (0210): blocks cannot hold them
            "SELECT EXISTS (SELECT 1 FROM requests WHERE run_id = %s::uuid "
            "AND (chunk_choices IS NOT NULL OR audio_ms IS NOT NULL OR audio_bytes IS NOT NULL))",
            (run_id,),
        ).fetchone()
        if choices is not None and choices[0]:
            return 0
        with read.cursor(name="peakload_pack_run", binary=True) as cur:
            cur.itersize = batch_rows
            cur.execute(select + " ORDER BY scheduled_at, idx", (run_id,))
            while rows := cur.fetchmany(batch_rows):
                records = [_record(r) for r in rows]
                off, off_lens = copyenc._flat([r.chunk_offsets_us for r in records])
                tok, tok_lens = copyenc._flat([r.chunk_tokens for r in records])
                if not np.array_equal(off_lens, tok_lens):
                    write.execute("DELETE FROM request_blocks WHERE run_id = %s::uuid", (run_id,))
                    return 0
                payload = blocks.encode_blocks(records, off, tok, off_lens)
                with write.cursor() as wc, wc.copy(COPY_DIRECT_BLOCKS) as cp:
                    cp.write(copyenc.HEADER + payload + copyenc.TRAILER)
                written += 1
    return written
