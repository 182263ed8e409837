"""M11, sweep truth: closed- and open-loop levels whose answers last about as long as a level,
against the simulated engine's log of when it wrote every token. Each level's output tokens/s
(analysis.metrics, from arrival stamps) must be within 1% of the tokens the engine wrote inside
the level's stored steady window; under `drain` no request of a level is in flight once the next
starts; under `cancel` the cut requests keep their partial tokens."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as m
from loadgen.engine.levels import LevelResult
from loadgen.results.records import Outcome, RequestRecord
from tests.support.shards import make_spec, run_spec
from tests.support.sim import SimProcess

# serial: throughput against the engine's truth log needs the cores to itself
pytestmark = [pytest.mark.integration, pytest.mark.serial]

# 300 tokens at 10 ms after a 50 ms TTFT: each answer lasts ~3.05 s, longer than the 2.5 s
# steady window of a 4 s level, so a throughput counted by schedule would be far off
ANSWER = {"prompt_tokens": 16, "output_tokens": 300}
LEVEL = {"duration_s": 4.0, "warmup_s": 1.0, "cooldown_s": 0.5}


def frame_of(records: list[RequestRecord]) -> pd.DataFrame:
    """The columns analysis.metrics needs, shaped as analysis.store.load returns them. The runs use
    the monotonic clock as their wall anchor (tests/support/shards.py), so `scheduled_at` here
    is a monotonic time: comparable with the engine's log."""
    return pd.DataFrame(
        {
            "scheduled_at": pd.to_datetime([r.scheduled_at_ns for r in records], utc=True),
            "sent_ns": [np.nan if r.sent_ns is None else r.sent_ns for r in records],
            "end_ns": [np.nan if r.end_ns is None else r.end_ns for r in records],
            "outcome": [r.outcome.value for r in records],
            "level": [r.level for r in records],
            "chunk_offsets_us": [list(r.chunk_offsets_us) for r in records],
            "chunk_tokens": [list(r.chunk_tokens) for r in records],
        }
    )


def window_of(level: LevelResult) -> m.Window:
    return m.Window(level.steady_start_wall_ns, level.steady_end_wall_ns)


def engine_tokens_in(truth: list[dict[str, Any]], w: m.Window) -> int:
    """Tokens the engine wrote inside the window (its own monotonic stamps)."""
    n = 0
    for t in truth:
        ns = np.asarray(t["chunk_ns"], dtype=np.int64)
        tok = np.asarray(t["chunk_tokens"], dtype=np.int64)
        n += int(tok[(ns >= w.start_ns) & (ns < w.end_ns)].sum())
    return n


def measured_and_true(
    sim: SimProcess, records: list[RequestRecord], levels: list[LevelResult]
) -> list[tuple[float, float]]:
    truth = [r for r in sim.wait_truth(len(records), timeout_s=20.0) if "chunk_ns" in r]
    df = frame_of(records)
    arr = m.Arrivals.of(m.ChunkArrays.from_frame(df), m.Timeline.from_frame(df))
    out = []
    for lv in levels:
        w = window_of(lv)
        out.append((m.output_token_rate(arr, w), engine_tokens_in(truth, w) / w.seconds))
    return out


def test_closed_loop_sweep_throughput_matches_the_engine_and_levels_do_not_overlap(
    sim: SimProcess,
) -> None:
    spec = make_spec(sim.base_url, {"concurrency": [4, 12], **LEVEL}, workload=ANSWER)
    result, sink = run_spec(spec)
    assert [lv.between_levels for lv in result.levels] == ["drain", "drain"]
    pairs = measured_and_true(sim, sink.records, result.levels)
    for (got, true), users in zip(pairs, (4, 12), strict=True):
        # every user streams ~98 tokens/s (one per 10 ms, a 50 ms TTFT per 3.05 s answer)
        assert true == pytest.approx(users * 98, rel=0.05)
        assert got == pytest.approx(true, rel=0.01)
    # drain: every level-0 request ended before level 1 began
    start1 = result.levels[1].started_wall_ns
    ends0 = [r.scheduled_at_ns + (r.end_ns or 0) for r in sink.records if r.level == 0]
    assert ends0 and max(ends0) <= start1
    assert result.levels[0].drained_wall_ns is not None
    assert result.levels[0].drained_wall_ns <= start1
    assert all(r.outcome is Outcome.OK for r in sink.records)


def test_open_loop_sweep_throughput_matches_the_engine(sim: SimProcess) -> None:
    spec = make_spec(
        sim.base_url, {"rate": [2.0, 5.0], "arrival": "constant", **LEVEL}, workload=ANSWER
    )
    result, sink = run_spec(spec, warm=24)
    for got, true in measured_and_true(sim, sink.records, result.levels):
        assert true > 0
        assert got == pytest.approx(true, rel=0.01)
    start1 = result.levels[1].started_wall_ns
    assert max(r.scheduled_at_ns + (r.end_ns or 0) for r in sink.records if r.level == 0) <= start1


def test_cancel_between_levels_keeps_partial_tokens(sim: SimProcess) -> None:
    spec = make_spec(
        sim.base_url,
        {"concurrency": [3, 3], "between_levels": "cancel", **LEVEL},
        workload=ANSWER,
    )
    result, sink = run_spec(spec)
    cut = [r for r in sink.records if r.level == 0 and r.outcome is Outcome.CANCELLED]
    # each user's second answer (sent ~3.05 s in) is still streaming when the level ends at 4 s
    assert len(cut) == 3
    for r in cut:
        assert r.error_phase == "level_ended"
        assert 0 < sum(r.chunk_tokens) < 300 and r.output_tokens == sum(r.chunk_tokens)
    start1 = result.levels[1].started_wall_ns
    assert max(r.scheduled_at_ns + (r.end_ns or 0) for r in sink.records if r.level == 0) <= start1
    truth = {t["request_id"]: t for t in sim.wait_truth(len(sink.records), timeout_s=20.0)}
    for r in cut:  # the engine wrote at least what the client kept
        assert truth[r.request_id]["completion_tokens"] >= sum(r.chunk_tokens)
    pairs = measured_and_true(sim, sink.records, result.levels)
    for got, true in pairs:
        assert got == pytest.approx(true, rel=0.01)


def test_overlap_is_todays_behaviour_and_shows_other_levels_in_flight(sim: SimProcess) -> None:
    spec = make_spec(
        sim.base_url,
        {"concurrency": [4, 4], "between_levels": "overlap", **LEVEL},
        workload=ANSWER,
    )
    result, sink = run_spec(spec)
    assert result.levels[1].started_wall_ns == result.levels[0].ended_wall_ns
    df = frame_of(sink.records)
    times = m.Timeline.from_frame(df)
    w1 = window_of(result.levels[1])
    level0 = (df["level"] == 0).to_numpy()
    # level 0's second answers (sent ~3.05 s in) stream until ~6.1 s: into level 1's window
    assert m.in_flight_max(times, w1, level0) == 4
    assert m.in_flight_mean(times, w1, level0) > 0.5
