"""Admission before work: a load the process cannot hold is refused with its numbers, in
milliseconds and without allocating it; inputs are read in full; closed-loop users are made as
they start, so a level never holds more users than can start inside it."""

from __future__ import annotations

import asyncio
import json
import resource
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.checks import admission
from loadgen.engine import levels
from loadgen.engine.loadmodels import SPAWN_INTERVAL_NS
from loadgen.engine.runner import run_shard
from loadgen.errors import CapacityError, SpecError
from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.loadgen.test_runner import ScriptedTarget, make_plan
from tests.support.memsink import MemorySink, ledger
from workers.planner import plan_run

ROOMY = admission.Capacity(max_streams=16_384, memory_bytes=64 << 30, fd_soft=1 << 20,
                           fd_hard=1 << 20)  # fmt: skip


def make_spec(load: dict[str, Any], **rest: Any) -> RunSpec:
    return spec_from_dict(
        {
            "name": "t",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": load,
            **rest,
        }
    )


def test_a_concurrency_of_1e20_is_refused_in_milliseconds_with_the_numbers() -> None:
    spec = make_spec({"concurrency": [10**20], "duration_s": 10})
    t0 = time.perf_counter()
    plans = plan_run(spec, "r")
    with pytest.raises(CapacityError) as e:
        admission.admit(spec, plans)
    elapsed = time.perf_counter() - t0
    msg = str(e.value)
    assert "1e+20 streams at once is over the per-process ceiling of 16,384" in msg
    assert "KiB per stream" in msg and "available" in msg
    assert elapsed < 1.0, elapsed  # planning and refusing allocate nothing per user


def test_the_ceiling_is_raised_only_by_the_explicit_setting() -> None:
    spec = make_spec({"concurrency": [20_000], "duration_s": 10})
    plans = plan_run(spec, "r")
    with pytest.raises(CapacityError, match="per-process ceiling of 16,384"):
        admission.check_capacity(admission.needs_of(spec, plans), ROOMY, "load")
    raised = admission.Capacity(
        admission.max_streams_setting({admission.ENV_MAX_STREAMS: "50000"}),
        64 << 30,
        1 << 20,
        1 << 20,
    )
    admission.check_capacity(admission.needs_of(spec, plans), raised, "load")
    with pytest.raises(CapacityError, match="must be a positive integer"):
        admission.max_streams_setting({admission.ENV_MAX_STREAMS: "lots"})


def test_memory_and_file_descriptors_are_checked_with_numbers() -> None:
    spec = make_spec({"concurrency": [2, 10_000], "duration_s": 10})
    needs = admission.needs_of(spec, plan_run(spec, "r"))
    assert needs.streams == 10_000  # levels run one after another: the busiest one counts
    assert needs.connections == admission.pool_size(4096)  # warm capped by max_concurrency
    small = admission.Capacity(16_384, 256 << 20, 1024, 4096)
    with pytest.raises(CapacityError) as e:
        admission.check_capacity(needs, small, "load")
    msg = str(e.value)
    assert "about 785.0 MiB of memory (10,000 x 64 KiB per stream + 160.0 MiB)" in msg
    assert "256.0 MiB is available" in msg
    assert "8,264 file descriptors where ulimit -n allows at most 4,096" in msg


def test_the_soft_fd_limit_is_raised_when_the_hard_one_allows() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = soft if hard == resource.RLIM_INFINITY else hard
    if top < 512:
        pytest.skip("open-file limits too small here to lower and raise")
    low = top - 128
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
        cap = admission.Capacity.of_host()
        assert cap.fd_soft == low
        admission.check_capacity(admission.Needs(1, low), cap, "load")  # BASE_FDS over soft
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low + admission.BASE_FDS
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_open_loop_streams_are_rate_times_deadline_capped() -> None:
    spec = make_spec(
        {"rate": [1.0, 5.0], "duration_s": 10, "max_concurrency": 100},
        regions=[{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
    )
    plans = plan_run(spec, "r")
    # 5 req/s x 0.5 x a 300 s deadline = 750 per shard, capped at its half of the run's 100
    assert [admission.shard_streams(spec, p) for p in plans] == [50, 50]
    slow = make_spec({"rate": [0.1], "duration_s": 10, "max_concurrency": 100})
    assert admission.shard_streams(slow, plan_run(slow, "r")[0]) == 30


def test_a_trace_entirely_past_the_duration_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": t}) + "\n" for t in (12.0, 15.5)))
    spec = make_spec({"trace": str(trace), "duration_s": 10})
    with pytest.raises(SpecError, match=r"every one of its 2 lines has t >= load.duration_s"):
        admission.check_inputs(spec)
    trace.write_text('{"t": 9.9}\n{"t": 12}\n')
    admission.check_inputs(spec)  # one line inside: it sends


def test_a_bad_dataset_is_read_before_the_run(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    spec = make_spec({"concurrency": [1], "duration_s": 1}, workload={"dataset": str(data)})
    with pytest.raises(SpecError, match='line 2: needs a string "prompt"'):
        admission.check_inputs(spec)


def test_closed_loop_users_are_made_as_they_start(monkeypatch: pytest.MonkeyPatch) -> None:
    made = 0
    original = levels.closed_loop_user

    async def counted(shard: Any, window: Any, user: int) -> None:
        nonlocal made
        made += 1
        await original(shard, window, user)

    monkeypatch.setattr(levels, "closed_loop_user", counted)
    duration = 0.2
    plan = make_plan({"concurrency": [1_000_000], "duration_s": duration}, users=[1_000_000])
    sink = MemorySink()
    result = asyncio.run(run_shard(plan, ScriptedTarget(ttft_s=0.01, tokens=1), sink))
    ledger(sink.records, result.requests_scheduled)
    # a user starts SPAWN_INTERVAL_NS after the previous one: no more can start in the level
    assert 0 < made <= int(duration * 1e9 / SPAWN_INTERVAL_NS) + 1, made
    assert result.status == "completed"
