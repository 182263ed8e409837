"""Deterministic records and ticks for store tests (the same arguments give the same ids, so a
replay from another process writes the very same rows)."""

from __future__ import annotations

import time

from loadgen.results.records import (
    Batch,
    Outcome,
    RequestRecord,
    Tick,
    TokenSource,
    make_request_id,
)

# A fixed wall anchor: rows land in one hypertable chunk and replays match bit for bit.
ANCHOR_NS = 1_795_000_000_000_000_000


def make_records(
    run_id: str,
    n: int,
    *,
    shard_id: str = "s0",
    start: int = 0,
    chunks: int = 16,
    prompt: str | None = None,
    response: str | None = None,
) -> list[RequestRecord]:
    out = []
    for i in range(start, start + n):
        ok = i % 7 != 3
        out.append(
            RequestRecord(
                request_id=make_request_id(run_id, shard_id, i),
                run_id=run_id,
                shard_id=shard_id,
                region="local",
                level=i % 3,
                index=i,
                scheduled_at_ns=ANCHOR_NS + i * 1_000_000,
                outcome=Outcome.OK if ok else Outcome.HTTP_ERROR,
                http_status=200 if ok else 503,
                error_phase=None if ok else "headers",
                sent_ns=1_000 + i,
                headers_ns=2_000_000,
                first_token_ns=30_000_000 if ok else None,
                first_answer_ns=30_000_000 if ok else None,
                end_ns=90_000_000,
                prompt_tokens=128,
                max_tokens=chunks,
                output_tokens=chunks if ok else 0,
                client_tokens=chunks if ok else 0,
                token_source=TokenSource.USAGE,
                chunk_offsets_us=[30_000 + 400 * k for k in range(chunks)] if ok else [],
                chunk_tokens=[1] * chunks if ok else [],
                prompt_text=prompt,
                response_text=response,
            )
        )
    return out


def make_ticks(run_id: str, n: int, *, shard_id: str = "s0", start: int = 0) -> list[Tick]:
    return [
        Tick(
            run_id,
            shard_id,
            "local",
            0,
            ANCHOR_NS + s * 1_000_000_000,
            4,
            10,
            9,
            1,
            90,
            0.5,
            0.3,
            0.2,
            12.5,
            50_000_000,
        )
        for s in range(start, start + n)
    ]


def feed(writer: object, run_id: str, n: int, per_batch: int, *, start: int = 0,
         rate_per_s: float | None = None) -> list[str]:  # fmt: skip
    """Write `n` records in batches of `per_batch` (paced at `rate_per_s` when given); returns
    the request ids written."""
    ids: list[str] = []
    t0 = time.perf_counter()
    for b0 in range(start, start + n, per_batch):
        recs = make_records(run_id, min(per_batch, start + n - b0), start=b0)
        writer.write(Batch(recs))  # type: ignore[attr-defined]
        ids += [r.request_id for r in recs]
        if rate_per_s:
            due = t0 + (b0 - start + per_batch) / rate_per_s
            time.sleep(max(0.0, due - time.perf_counter()))
    return ids
