"""Packing a run stored without request_blocks (written before deploy/sql/0110, or generated
in SQL): its rows are read back and packed by the writer's own encoder, in blocks of the
writer's batch size, replacing any blocks the run had, in one transaction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg

from loadgen.records import Outcome, Phase, RequestRecord, TokenSource
from workers.store import blocks, copyenc
from workers.store.batchsql import COPY_DIRECT_BLOCKS

_COLUMNS = (
    "request_id::text", "run_id::text", "shard_id", "region", "level", "idx",
    "(extract(epoch FROM scheduled_at) * 1000000)::int8", "phase", "attempt", "outcome",
    "http_status", "error_phase", "sent_ns", "headers_ns", "first_token_ns", "first_answer_ns",
    "end_ns", "prompt_tokens", "max_tokens", "output_tokens", "reasoning_tokens",
    "usage_prompt_tokens", "usage_completion_tokens", "client_tokens", "token_source",
    "chunk_offsets_us", "chunk_tokens", "connect_ns", "resent",
    "server_prompt_tokens", "server_prefill_ms", "server_decode_tokens", "server_decode_ms",
    "server_cached_tokens", "server_queue_ms",
)  # fmt: skip


def _record(row: tuple[Any, ...]) -> RequestRecord:
    # resent is NULL on rows written before deploy/sql/0120 (not recorded): kept None, not 0,
    # so the block says what the row says
    (rid, run, shard, region, level, idx, sched_us, phase, attempt, outcome, status, err_phase,
     sent, headers, first, answer, end, prompt, max_tok, out, reasoning, usage_p, usage_c,
     client, source, offsets, tokens, connect, resent, s_prompt, s_prefill, s_decode_n,
     s_decode, s_cached, s_queue) = row  # fmt: skip
    return RequestRecord(
        request_id=rid, run_id=run, shard_id=shard, region=region, level=level, index=idx,
        scheduled_at_ns=sched_us * 1000, phase=Phase(phase), attempt=attempt,
        outcome=Outcome(outcome), http_status=status, error_phase=err_phase, sent_ns=sent,
        headers_ns=headers, first_token_ns=first, first_answer_ns=answer, end_ns=end,
        prompt_tokens=prompt, max_tokens=max_tok, output_tokens=out, reasoning_tokens=reasoning,
        usage_prompt_tokens=usage_p, usage_completion_tokens=usage_c, client_tokens=client,
        token_source=TokenSource(source), chunk_offsets_us=offsets, chunk_tokens=tokens,
        connect_ns=connect, resent=resent, server_prompt_tokens=s_prompt,
        server_prefill_ms=s_prefill, server_decode_tokens=s_decode_n, server_decode_ms=s_decode,
        server_cached_tokens=s_cached, server_queue_ms=s_queue,
    )  # fmt: skip


def pack_run(url: str, run_id: str, *, batch_rows: int = 5_000) -> int:
    """Write request_blocks for every row of the run (ordered by scheduled time), replacing
    the run's blocks. Returns the number of blocks written. Rows whose two chunk arrays differ
    in length cannot be packed: then no block is kept and readers use `requests`."""
    select = "SELECT " + ", ".join(_COLUMNS) + " FROM requests WHERE run_id = %s::uuid"
    written = 0
    with psycopg.connect(url) as read, psycopg.connect(url) as write, write.transaction():
        write.execute("DELETE FROM request_blocks WHERE run_id = %s::uuid", (run_id,))
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
