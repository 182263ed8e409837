"""Against the real engine (llama.cpp's `llama-server`, SmolLM2-135M) serving LoRA adapters made
offline in the test (random low-rank weights, tests/support/lora.py), loaded with `--lora`
and `--lora-init-without-apply` and chosen per request by the body's `lora` list; and its
prefix cache, reported by the server itself (`timings.cache_n`). `peakload run` and `report`
as a user types them, stored in the embedded PostgreSQL.

What llama-server does, and what the tests hold it to: a slot's prompt cache is cleared when
the adapter it served changes, so the first request after a switch prefills its whole prompt
while a steady request of the same adapter prefills only what follows the cached shared
prefix (the base model is sent as every adapter at scale 0: an empty list would keep the
cache); a request carrying the run's shared prefix is served mostly from cache, one without it
(same length, `compare_prefix`) is not, and its TTFT is the longer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from analysis.stats.workload_split import STEADY, SWITCH, switch_kinds
from analysis.store import load
from tests.loadgen.test_real_engine import assert_no_failures, run
from tests.support.engine import LlamaServer, engine_paths, split_cpus, start_llama
from tests.support.lora import write_lora
from tests.support.stores import FreshDatabase

# alone: TTFT against the engine's own cache, llama-server filling the CPU it is pinned to
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]

LOOSE_VALIDITY = (
    "[validity]\nmax_loop_lag_p99_ms = 1e6\nmax_dispatch_delay_p99_ms = 1e6\n"
    "max_cpu_percent = 1e6\nmax_load_shortfall = 0.99\n"
)
PROMPT_TOKENS = 160
SHARED = 0.75


@pytest.fixture(scope="module")
def lora_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-server with two random adapters loaded at scale 0 (applied per request)."""
    paths = engine_paths()
    if paths is None:
        pytest.skip("PEAKLOAD_TEST_LLAMA_SERVER / PEAKLOAD_TEST_LLAMA_MODEL are not set")
    binary, model = paths
    tmp = tmp_path_factory.mktemp("lora")
    files = [write_lora(Path(model), tmp / f"lora{k}.gguf", seed=k, scale=0.1) for k in (0, 1)]
    extra = [a for f in files for a in ("--lora", str(f))] + ["--lora-init-without-apply"]
    server_cpus, _ = split_cpus()
    with start_llama(binary, model, tmp, server_cpus, extra) as server:
        yield server


@pytest.fixture
def db(plain_url: str, fresh_database: Callable[..., FreshDatabase]) -> str:
    return fresh_database(plain_url).url


def spec_text(server: LlamaServer, workload: str, duration_s: float) -> str:
    return f"""
name = "real-lora"
[target]
api = "openai-completions"
base_url = "{server.base_url}"
model = "smollm2"
ignore_eos = true
[workload]
prompt_tokens = {PROMPT_TOKENS}
output_tokens = 2
shared_prefix_fraction = {SHARED}
{workload}
[load]
concurrency = [1]
duration_s = {duration_s}
warmup_s = 0.5
{LOOSE_VALIDITY}
"""


def rows(db: str, run_id: str) -> Any:
    with psycopg.connect(db) as conn:
        return load.load_requests(conn, run_id, arrays=False)


def ttft_ms(df: Any) -> np.ndarray:
    return np.asarray((df["first_token_ns"] - df["sent_ns"]) / 1e6, dtype=np.float64)


def test_the_server_applies_each_adapter_it_is_asked_for(lora_llama: LlamaServer) -> None:
    """Greedy answers to one prompt differ by adapter: the per-request `lora` list is honoured."""
    listed = httpx.get(lora_llama.url + "/lora-adapters", timeout=10).raise_for_status().json()
    assert [a["id"] for a in listed] == [0, 1]
    answers = []
    for lora in ([], [{"id": 0, "scale": 1.0}], [{"id": 1, "scale": 1.0}]):
        body = {
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0,
            "lora": lora,
        }
        r = httpx.post(lora_llama.base_url + "/completions", json=body, timeout=60)
        answers.append(r.raise_for_status().json()["choices"][0]["text"])
    assert len(set(answers)) == 3, answers


def test_per_adapter_breakdown_and_the_switch_cost(
    lora_llama: LlamaServer, db: str, tmp_path: Path
) -> None:
    workload = """adapter_field = "lora"
switch_every = 2
[[workload.adapters]]
name = "base"
weight = 1
[[workload.adapters]]
name = "sql"
lora_id = 0
weight = 1
[[workload.adapters]]
name = "chat"
lora_id = 1
weight = 1
"""
    summary = run(spec_text(lora_llama, workload, 14), db, tmp_path, "--no-probe")
    assert_no_failures(summary)
    assert summary["adapters"] == ["base", "chat", "sql"]
    blocks = summary["levels"][0]["adapters"]
    assert sum(b["requests_ok"] for b in blocks.values()) == summary["levels"][0]["requests_ok"]
    assert all(b["ttft_ms"]["p50"] for b in blocks.values())
    df = rows(db, summary["run_id"])
    assert set(df["adapter"]) == {"base", "chat", "sql"}
    kinds = switch_kinds(df)
    ok = (df["outcome"] == "ok").to_numpy()
    after, steady = ok & (kinds == SWITCH), ok & (kinds == STEADY)
    assert after.sum() >= 2 and steady.sum() >= 4, (after.sum(), steady.sum())
    cached = df["server_cached_tokens"].to_numpy(dtype=np.float64)
    shared = int(PROMPT_TOKENS * SHARED)
    # the slot's cache is cleared on a switch, kept for the same adapter
    assert np.median(cached[steady]) >= 0.5 * shared, cached[steady]
    assert np.median(cached[after]) < 0.5 * np.median(cached[steady]), cached[after]
    t = ttft_ms(df)
    assert np.median(t[after]) > 1.3 * np.median(t[steady]), (t[after], t[steady])
    costs = [b["switch"]["switch_cost_ms"] for b in blocks.values()]
    assert any(c is not None and c > 0 for c in costs), costs
    print(  # the measured numbers, for the record (pytest -s)
        f"lora: after switch TTFT p50 {np.median(t[after]):.0f} ms (n {after.sum()}, cache_n "
        f"p50 {np.median(cached[after]):.0f}); steady {np.median(t[steady]):.0f} ms (n "
        f"{steady.sum()}, cache_n p50 {np.median(cached[steady]):.0f}); costs {costs}"
    )


def test_ttft_with_and_without_the_shared_prefix(
    lora_llama: LlamaServer, db: str, tmp_path: Path
) -> None:
    summary = run(spec_text(lora_llama, "compare_prefix = true", 12), db, tmp_path, "--no-probe")
    assert_no_failures(summary)
    pc = summary["levels"][0]["prefix_cache"]
    w, wo = pc["with"], pc["without"]
    assert w["requests"] >= 3 and wo["requests"] >= 3, pc
    assert w["cache_reported"] == w["requests"] and wo["cache_reported"] == wo["requests"]
    shared = int(PROMPT_TOKENS * SHARED)
    assert w["cached_tokens"]["p50"] >= 0.5 * shared, pc
    assert wo["cached_tokens"]["p50"] <= 0.1 * shared, pc
    assert pc["ttft_ratio"] < 0.8, pc
    print(
        f"prefix: with TTFT p50 {w['ttft_ms']['p50']:.0f} ms (cache_n p50 "
        f"{w['cached_tokens']['p50']:.0f}, n {w['requests']}); without "
        f"{wo['ttft_ms']['p50']:.0f} ms (cache_n p50 {wo['cached_tokens']['p50']:.0f}, n "
        f"{wo['requests']}); ratio {pc['ttft_ratio']:.2f}"
    )
