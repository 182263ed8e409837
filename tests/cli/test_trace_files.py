"""A bad trace file in each public layout, as a user runs it: `peakload run` prints one line
naming the file, the line and the column, exits 2 (bad input) with no traceback, and writes no
run row (the file is read through before anything is stored)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psycopg
import pytest

from analysis.verdicts.exitcodes import Exit
from tests.cli.test_hostile_input import (
    UNREACHABLE,
    assert_one_clear_message,
    one_store,
    spec,
    write,
)
from tests.cli.test_run_command import LOOSE_VALIDITY, count_runs, peakload
from tests.support.cli import ROOT
from tests.support.sim import SimProcess

__all__ = ["one_store"]  # the fixture, used by name

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples"

BAD = {
    "mooncake": (
        "trace.jsonl",
        '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
        '{"timestamp": 10535, "input_length": 672, "output_length": -26, "hash_ids": [46]}\n',
        'line 2, column "output_length"',
    ),
    "burstgpt": (
        "trace.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,10x87,0,1087,Conversation log\n",
        'line 3, column "Request tokens"',
    ),
    "azure": (
        "trace.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n"
        "2023-11-16 18:15:50.9951690,3180\n",
        "line 3: 2 fields, the header has 3",
    ),
}


@pytest.mark.parametrize("fmt", sorted(BAD))
def test_a_bad_public_trace_is_refused_before_the_run_row(
    fmt: str, one_store: str, tmp_path: Path
) -> None:
    name, text, want = BAD[fmt]
    data = write(tmp_path, name, text)
    load = f'trace = "{data}"\ntrace_format = "{fmt}"\ntrace_speedup = 100\nduration_s = 2.0'
    proc = peakload(
        ["run", str(write(tmp_path, "s.toml", spec(UNREACHABLE, load=load)))], one_store, tmp_path
    )
    assert_one_clear_message(proc, Exit.BAD_INPUT, want, str(data))
    assert int(Exit.BAD_INPUT) == 2
    assert count_runs(one_store) == 0


def test_the_shipped_mooncake_example_runs_end_to_end(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    """examples/trace-mooncake.toml aimed at the sim: every line of its sample sent and stored,
    on the trace's times divided by the speed-up, asking the lines' output lengths."""
    example = EXAMPLES / "trace-mooncake.toml"
    text = example.read_text().replace("http://127.0.0.1:8000/v1", sim.base_url)
    text = text.replace('"mooncake-sample.jsonl"', f'"{EXAMPLES / "mooncake-sample.jsonl"}"')
    text = text.replace("trace_speedup = 5.0", "trace_speedup = 20.0")  # 25.6 s in 1.3 s
    text = text.replace("duration_s = 10 ", "duration_s = 2 ") + LOOSE_VALIDITY
    # 30 requests cannot prove the default 1 % error budget (exit 3): turn the budget off
    text = "max_error_rate = 1\n" + text
    proc = peakload(["run", str(write(tmp_path, "s.toml", text)), "--quiet"], one_store, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (EXAMPLES / "mooncake-sample.jsonl").read_text().splitlines()]
    with psycopg.connect(one_store) as conn:
        got = conn.execute(
            "SELECT extract(epoch FROM scheduled_at)::float8, max_tokens FROM requests "
            "ORDER BY scheduled_at"
        ).fetchall()
    assert len(got) == len(lines) == 30
    t = np.array([g[0] for g in got])
    want = np.array([x["timestamp"] / 1000 / 20.0 for x in lines])
    assert np.abs((t - t[0]) - (want - want[0])).max() < 1e-3  # timestamptz keeps microseconds
    assert sorted(g[1] for g in got) == sorted(x["output_length"] for x in lines)
