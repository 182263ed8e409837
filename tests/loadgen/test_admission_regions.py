"""Admission judges a run's load, not how it is split: the same trace or rate over five regions
needs what it needs in one (#28 point 5), because `max_concurrency` caps the run's requests in
flight and each shard holds its share of it."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.checks import admission
from tests.loadgen.test_admission import make_spec
from workers.planner import plan_run, with_fraction_offsets

FIVE = [{"name": f"r{i}", "share": 0.2} for i in range(5)]


def test_a_six_line_trace_over_five_regions_is_admitted_as_at_most_six_streams(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": i * 0.5}) + "\n" for i in range(6)))
    spec = make_spec({"trace": str(trace), "duration_s": 10}, regions=FIVE)
    plans = with_fraction_offsets(plan_run(spec, "r"))
    needs = admission.admit(spec, plans)  # refused as "20,480 streams" before the fix
    assert needs.streams <= 6
    # every line lands on exactly one shard: the shards' busiest windows add up to the lines
    assert sum(admission.shard_streams(spec, p) for p in plans) == 6


def test_a_trace_counts_its_busiest_deadline_window_not_every_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    # 3 lines at once, then one every 20 s: with a 10 s deadline at most 3 are in flight
    lines = [0.0, 0.0, 0.0, 20.0, 40.0, 60.0]
    trace.write_text("".join(json.dumps({"t": t}) + "\n" for t in lines))
    spec = make_spec({"trace": str(trace), "duration_s": 100})
    spec = spec.model_copy(update={"target": spec.target.model_copy(update={"deadline_s": 10.0})})
    assert admission.admit(spec, plan_run(spec, "r")).streams == 3


def test_100_req_s_over_five_regions_needs_what_it_needs_in_one() -> None:
    one = make_spec({"rate": [100.0], "duration_s": 10})
    five = make_spec({"rate": [100.0], "duration_s": 10}, regions=FIVE)
    one_needs = admission.admit(one, plan_run(one, "r"))
    five_needs = admission.admit(five, plan_run(five, "r"))  # refused (20,480) before the fix
    assert one_needs.streams == five_needs.streams == 4096  # the run's max_concurrency


def test_the_shards_share_max_concurrency_and_the_runner_caps_each_at_its_share() -> None:
    spec = make_spec({"rate": [10.0], "duration_s": 10, "max_concurrency": 7}, regions=FIVE)
    plans = plan_run(spec, "r")
    assert sum(p.in_flight_cap() for p in plans) == 7
    assert sorted(p.in_flight_cap() for p in plans) == [1, 1, 1, 2, 2]
    # at least one each, even where the cap is below the shard count
    tiny = make_spec({"rate": [10.0], "duration_s": 10, "max_concurrency": 2}, regions=FIVE)
    assert [p.in_flight_cap() for p in plan_run(tiny, "r")] == [1] * 5
