"""Hostile input, second round (issue 22, point 2): spec shapes that are each field valid but
cannot be run as written (a search starting above its maximum, sessions whose history would
exhaust memory, a deadline no answer can meet). Each `peakload run` is refused before the
probe: exit 2, one message naming the field and its numbers, no run stored, nothing sent."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from analysis.verdicts.exitcodes import Exit
from tests.cli.test_hostile_input import assert_one_clear_message, one_store, spec, write
from tests.cli.test_run_command import count_runs, peakload
from tests.support.sim import SimProcess

pytestmark = pytest.mark.integration
__all__ = ["one_store"]

SHAPES = {
    "saturation_start_above_max": (
        {"load": "saturation = { start = 64.0, max = 8.0 }\nduration_s = 1.0"},
        ["load.saturation", "start (64) is above max (8)"],
    ),
    # 4,096 users (far under the stream ceiling; 256 MiB of streams alone) each holding 1,000
    # turns of 4,096-token answers: 16 + 999 x 64 + 1,000 x 4,096 tokens of history each,
    # 254 GiB in all
    "sessions_exhaust_memory": (
        {
            "load": "concurrency = [4096]\nduration_s = 1.0",
            "workload": "prompt_tokens = 16\noutput_tokens = 4096\n"
            "[workload.sessions]\nturns = 1000\nuser_tokens_per_turn = 64",
        },
        [
            "load.concurrency",
            "4,096 x (64 KiB per stream",
            "of session history at the last turn",
            "4,159,952 tokens x 16 bytes",
            "available",
        ],
    ),
    "deadline_1e-9": (
        {"target": "deadline_s = 1e-9"},
        ["target.deadline_s", "1e-09 s is below the floor of 10 ms"],
    ),
    "deadline_zero": ({"target": "deadline_s = 0.0"}, ["target.deadline_s"]),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_shapes_that_cannot_run_are_refused_before_any_request(
    case: str, sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    kw, want = SHAPES[case]
    path = write(tmp_path, "s.toml", spec(sim.base_url, **kw))
    t0 = time.monotonic()
    proc = peakload(["run", str(path)], one_store, tmp_path)
    elapsed = time.monotonic() - t0
    assert_one_clear_message(proc, Exit.BAD_INPUT, *want)
    assert count_runs(one_store) == 0
    assert sim.read_truth() == []  # nothing was sent, not even the probe
    print(f"{case}: refused in {elapsed:.2f} s (process start and imports included)")
