"""The demo's sweep (`peakload demo`'s spec, against the simulated small GPU it uses) no longer
bends back: with levels drained and throughput counted from token arrivals, output tok/s rises
with the load (1, 8, 32 streams on 16 slots), no level carries another's requests, and the
busiest level never holds more requests in flight than its 32 streams (issue 11 saw 40)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from analysis import metrics as m
from analysis.reports.summary import summarize_run
from analysis.stats.frontier import frontier_points
from analysis.store.load import load_levels, load_requests
from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import start_sim
from ui.commands.demo import DEMO_PRESET, demo_spec
from workers.local import run_local

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_demo_frontier_rises_with_the_load(
    plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    db = fresh_database(plain_url)
    with start_sim(["--preset", DEMO_PRESET], tmp_path) as sim:
        spec = spec_from_dict(demo_spec(sim.base_url), where="demo spec")
        run = run_local(spec, database_url=db.url)
    assert run.status == "completed"
    with psycopg.connect(db.url) as conn:
        summary = summarize_run(conn, run.run_id)
        df, levels = load_requests(conn, run.run_id), load_levels(conn, run.run_id)
    points = frontier_points(df, levels, resamples=50)
    loads = [float(v) for v in points["value"]]
    assert loads == [1.0, 8.0, 32.0]
    tok_s = [float(x) for x in points["output_tokens_per_s"]]
    assert tok_s[0] < tok_s[1] < tok_s[2], tok_s  # the frontier's throughput axis rises
    assert [lv["output_tokens_per_s"] for lv in summary["levels"]] == pytest.approx(tok_s)
    times = m.Timeline.from_frame(df)
    level_col = df["level"].to_numpy()
    for lv, load in zip(summary["levels"], loads, strict=True):
        assert lv["between_levels"] == "drain"
        assert lv["other_levels_in_flight_max"] == 0, lv  # drained: nothing of another level
        row = levels[levels["level"] == lv["level"]].iloc[0].to_dict()
        window = m.level_window(row, df, level_col == lv["level"])
        assert m.in_flight_max(times, window) <= load, lv  # every request in the store counted
