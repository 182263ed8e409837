"""The instrument against the simulated engine, on what it counts rather than on when: status
codes against the engine's log (M7), failed streams keeping their partial tokens (M6), odd
chunking (M5), an idle timeout, and the frozen server that must show in p99 from the schedule
(M1, a 5-s freeze against a 500-ms bound). None of them measures within milliseconds, so they
run in the parallel phase; the accuracy checks stay serial in tests/loadgen/test_against_sim.py.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from loadgen.results.records import Outcome
from tests.support.memsink import MemorySink
from tests.support.shards import make_spec, run_spec
from tests.support.sim import SimProcess, truth_by_id

pytestmark = pytest.mark.integration


def test_http_error_counts_equal_the_servers_log(sim_factory: Any) -> None:
    """M7: seeded 429 (with Retry-After) and 503; no silent retries; counts match exactly."""
    sim = sim_factory(
        [
            "--preset",
            "fixed",
            "--ttft-ms",
            "5",
            "--itl-ms",
            "2",
            "--fault",
            "429=0.15",
            "--fault",
            "503=0.1",
            "--seed",
            "11",
        ]
    )
    spec = make_spec(
        sim.base_url, {"rate": [60.0], "arrival": "poisson", "duration_s": 3.0, "seed": 3}
    )
    result, sink = run_spec(spec)
    client = Counter(r.http_status for r in sink.records if r.outcome is Outcome.HTTP_ERROR)
    truth = truth_by_id(sim, len(sink.records))
    server = Counter(t["status"] for t in truth.values() if t["status"] in (429, 503))
    assert client == server and client[429] > 5 and client[503] > 3
    assert len(truth) == len(sink.records)  # one attempt per scheduled request
    assert all(r.retry_after_s == 1.0 for r in sink.records if r.http_status == 429)
    assert result.outcomes["http_error"] == sum(client.values())


@pytest.mark.parametrize(
    ("fault", "outcome", "phase"),
    [
        ("error_event:5", Outcome.STREAM_ERROR, None),
        ("reset:7", Outcome.STREAM_ERROR, None),
        ("no_done", Outcome.STREAM_ERROR, None),
    ],
)
def test_stream_failures_keep_their_partial_tokens(
    sim: SimProcess, fault: str, outcome: Outcome, phase: str | None
) -> None:
    """M6: each failure is a record keeping what arrived, matching the engine's writes."""
    spec = make_spec(
        sim.base_url,
        {"concurrency": [2], "duration_s": 0.8},
        target={"headers": {"x-peakload-sim-fault": fault}},
    )
    _, sink = run_spec(spec)
    truth = truth_by_id(sim, len(sink.records))
    assert sink.records
    for r in sink.records:
        assert r.outcome is outcome, (r.outcome, r.error_detail)
        written = sum(truth[r.request_id]["chunk_tokens"])
        assert r.output_tokens == written > 0


def test_a_trickling_stream_hits_the_idle_timeout(sim: SimProcess) -> None:
    spec = make_spec(
        sim.base_url,
        {"concurrency": [1], "duration_s": 0.5},
        target={
            "headers": {"x-peakload-sim-fault": "trickle:2"},
            "idle_timeout_s": 0.5,
            "deadline_s": 10,
        },
    )
    _, sink = run_spec(spec, max_requests=1)
    (r,) = sink.records
    # the trickle starts before any whole token: the idle timer fires waiting for the first one
    assert r.outcome is Outcome.TIMEOUT and r.error_phase == "first_token"
    assert r.output_tokens == 0 and r.headers_ns is not None


@pytest.mark.parametrize(
    "fault", ["multi_token:3", "utf8_split", "coalesce:5", "reasoning:6", "none"]
)
def test_odd_chunking_gives_the_same_counts(sim: SimProcess, fault: str) -> None:
    """M5 end to end: tokens per event, UTF-8 split across writes, many events per write and
    reasoning deltas: the same token count as the server's usage, every way."""
    headers = {} if fault == "none" else {"x-peakload-sim-fault": fault}
    spec = make_spec(
        sim.base_url,
        {"concurrency": [2], "duration_s": 0.6},
        target={"headers": headers},
        workload={"prompt_tokens": 16, "output_tokens": 24},
        store_content=True,
    )
    _, sink = run_spec(spec)
    for r in sink.records:
        assert r.outcome is Outcome.OK, r.error_detail
        assert r.output_tokens == r.usage_completion_tokens == 24
        assert sum(r.chunk_tokens) == 24
        assert r.response_text is not None and "\ufffd" not in r.response_text
        if fault.startswith("reasoning"):
            assert r.reasoning_tokens == 6
            assert r.first_answer_ns is not None and r.first_token_ns is not None
            # later, or in the same read (one stamp) when a starved loop read them together
            assert r.first_answer_ns >= r.first_token_ns


@pytest.mark.slow
def test_a_frozen_server_shows_in_p99_from_the_schedule(sim_factory: Any) -> None:
    """M1: open loop at 20 req/s; the server freezes 5 s every 30 s."""
    sim = sim_factory(["--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", "--stall", "5/30"])
    spec = make_spec(
        sim.base_url,
        {"rate": [20.0], "arrival": "constant", "duration_s": 36.0},
        workload={"prompt_tokens": 16, "output_tokens": 8},
    )
    _, sink = run_spec(spec)
    recs = [r for r in sink.records if r.outcome is Outcome.OK]
    ttft_sched = np.array([r.first_token_ns for r in recs]) / 1e6
    assert np.percentile(ttft_sched, 50) < 500
    assert np.percentile(ttft_sched, 99) > 3000  # the freeze is visible, not omitted
    assert len(sink.records) == 720  # arrivals never paused


def test_memory_sink_collects(sim: SimProcess) -> None:
    """A plain short run: every request ok, counts from usage, one record each."""
    spec = make_spec(sim.base_url, {"concurrency": [4], "duration_s": 1.0})
    result, sink = run_spec(spec)
    assert isinstance(sink, MemorySink) and result.status == "completed"
    assert all(r.outcome is Outcome.OK and r.output_tokens == 16 for r in sink.records)
