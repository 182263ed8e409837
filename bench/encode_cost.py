"""The store writer's encoder alone: CPU µs per record to build a batch's `requests` binary COPY
payload and its request_blocks row (workers/store/copyenc.encode_batch), on 10,000 records of
128 chunks made as bench/ingest.py makes them; the minimum of repeated passes, process CPU time
(a shared machine's preemption is not counted).

    python bench/encode_cost.py                   # records as most APIs give them
    python bench/encode_cost.py --server-timings  # every column set (llama.cpp's timings)

Compare two trees by running it with each on PYTHONPATH (imports come from the checkout first).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.results.records import Outcome, RequestRecord, TokenSource
from workers.store import copyenc

N, CHUNKS, REPEATS = 10_000, 128, 15


def records(server_timings: bool) -> list[RequestRecord]:
    offsets = [40_000 + 10_000 * k for k in range(CHUNKS)]
    tokens = [1] * CHUNKS
    run_id = str(uuid.uuid4())
    out = []
    for i in range(N):
        r = RequestRecord(
            request_id=str(uuid.UUID(int=(i << 32) | 0xBEEF, version=4)), run_id=run_id,
            shard_id="bench-0", region="local", level=0, index=i,
            scheduled_at_ns=1_795_000_000_000_000_000 + i * 50_000, outcome=Outcome.OK,
            http_status=200, sent_ns=20_000, headers_ns=5_000_000, first_token_ns=40_000_000,
            first_answer_ns=40_000_000, end_ns=1_300_000_000, prompt_tokens=512,
            max_tokens=CHUNKS, output_tokens=CHUNKS, usage_completion_tokens=CHUNKS,
            client_tokens=CHUNKS, token_source=TokenSource.USAGE,
            chunk_offsets_us=offsets, chunk_tokens=tokens,
        )  # fmt: skip
        if server_timings:  # as bench/ingest.py --server-timings
            r = dataclasses.replace(
                r, connect_ns=180_000 if i % 10 == 0 else None, server_prompt_tokens=512,
                server_prefill_ms=31.25 + i % 7, server_decode_tokens=CHUNKS,
                server_decode_ms=1254.5 + i % 13, server_cached_tokens=0,
            )  # fmt: skip
        out.append(r)
    return out


def best_us(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best / N * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server-timings", action="store_true")
    args = ap.parse_args()
    recs = records(args.server_timings)
    req, blk = copyenc.encode_batch(recs, False)
    only = best_us(lambda: copyenc.encode_batch(recs, False, blocks=False))
    both = best_us(lambda: copyenc.encode_batch(recs, False))
    print(
        f"requests {only:.2f} µs/record, requests + block {both:.2f} µs/record; "
        f"bytes/record {len(req) / N:.0f} + {len(blk) / N:.0f}"
    )


if __name__ == "__main__":
    main()
