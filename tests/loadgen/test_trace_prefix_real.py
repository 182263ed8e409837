"""A Mooncake trace's hash ids reach a real prefix cache: replayed against llama-server
(SmolLM2-135M), a request naming the blocks an earlier one named is served those tokens from
the slot's cache (its own `timings.cache_n`, kept as `server_cached_tokens`), and one naming
new blocks is not. Skipped only where the engine is not installed (deploy/local/llama.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.results.records import Outcome
from tests.support.engine import LlamaServer, llama
from tests.support.shards import make_spec, run_spec

__all__ = ["llama"]  # the fixture, used by name

# alone: prefix-cache hits and TTFT on llama-server, which fills the CPU it is pinned to
pytestmark = [pytest.mark.integration, pytest.mark.alone]

BLOCK = 64  # trace_block_tokens: short blocks keep the prefill quick on a busy CPU


def test_shared_hash_ids_are_served_from_the_engines_prefix_cache(
    llama: LlamaServer, tmp_path: Path
) -> None:
    # three sequential requests of 180 tokens (three blocks, the last cut short): the second
    # shares the first's two leading blocks (128 tokens), the third shares none
    rows = [
        {"timestamp": 0, "input_length": 180, "output_length": 4, "hash_ids": [0, 1, 2]},
        {"timestamp": 5000, "input_length": 180, "output_length": 4, "hash_ids": [0, 1, 3]},
        {"timestamp": 10000, "input_length": 180, "output_length": 4, "hash_ids": [7, 8, 9]},
    ]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = make_spec(
        llama.base_url,
        {"trace": str(trace), "trace_block_tokens": BLOCK, "duration_s": 16.0},
        target={"deadline_s": 60.0},
        workload={"prompt_tokens": 16, "output_tokens": 4, "seed": 3},
    )
    _, sink = run_spec(spec, warm=1)
    recs = sorted(sink.records, key=lambda r: r.scheduled_at_ns)
    assert [r.outcome for r in recs] == [Outcome.OK] * 3, [(r.outcome, r.error_phase) for r in recs]
    cached = [r.server_cached_tokens for r in recs]
    print("cache_n per request:", cached)
    assert all(c is not None for c in cached), cached
    first, shared, fresh = (int(c or 0) for c in cached)
    # every request opens with the chat template's tokens (a fresh one may reuse those only);
    # the second also reuses its two shared blocks, 64 one-token words each
    assert first < BLOCK and fresh < BLOCK, cached
    assert shared >= 0.9 * 2 * BLOCK and shared - fresh >= 0.8 * 2 * BLOCK, cached
