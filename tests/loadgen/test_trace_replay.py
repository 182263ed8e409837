"""Each public trace layout replayed against the simulated engine (a real HTTP server in its own
process): every line of the window is sent, at the trace's time divided by the speed-up (the
schedule is exact; the send itself is late by the client's lateness only), asking the
trace's output length with a prompt of the trace's input length as the engine counted it.
The fixtures' layouts are described in tests/loadgen/traces/README.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.engine.traces import read_trace
from loadgen.results.records import Outcome
from tests.support.shards import make_spec, run_spec

HERE = Path(__file__).parent / "traces"

pytestmark = pytest.mark.integration

# file, speed-up, window (start, duration) in the trace's own seconds
CASES: dict[str, tuple[str, float, tuple[float, float | None]]] = {
    "mooncake": ("mooncake.jsonl", 10.0, (0.0, None)),
    "burstgpt": ("burstgpt.csv", 20.0, (20.0, 60.0)),
    "azure": ("azure_conv.csv", 5.0, (0.0, None)),
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_public_trace_replays_on_its_scaled_times_with_its_lengths(
    fmt: str, sim_factory: Any
) -> None:
    name, speedup, (start, duration) = CASES[fmt]
    path = HERE / name
    sim = sim_factory(["--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "1"])
    load: dict[str, Any] = {
        "trace": str(path),
        "trace_speedup": speedup,
        "trace_start_s": start,
        "duration_s": 4.0,
    }
    if duration is not None:
        load["trace_duration_s"] = duration
    spec = make_spec(sim.base_url, load, target={"deadline_s": 10.0})
    _, sink = run_spec(spec, warm=8)

    rows = [
        e
        for e in read_trace(str(path))
        if start <= e.t_s < (start + duration if duration else np.inf)
    ]
    want = np.array([(e.t_s - start) / speedup for e in rows])
    assert want.max() < 4.0 and len(rows) >= 10  # the whole window falls inside duration_s
    recs = sorted(sink.records, key=lambda r: (r.scheduled_at_ns, r.request_id))
    assert len(recs) == len(rows)
    assert all(r.outcome is Outcome.OK for r in recs), [r.outcome for r in recs]
    got = np.array([r.scheduled_at_ns for r in recs], dtype=np.int64)
    # the schedule is the trace's, scaled: offsets from the first send match to the nanosecond
    # rounding (window start + int(offset * 1e9))
    assert np.abs((got - got[0]) / 1e9 - (want - want[0])).max() < 1e-6
    late_ms = np.array([r.sent_ns for r in recs]) / 1e6
    print(
        f"{fmt}: {len(recs)} lines, send lateness p50 {np.median(late_ms):.2f} ms, "
        f"max {late_ms.max():.2f} ms"
    )
    assert np.median(late_ms) < 50  # sent on time, not at the end (a loose, machine-proof bound)

    truth = {t["request_id"]: t for t in sim.wait_truth(len(rows), timeout_s=20.0)}
    # lines at one instant may go in either order: compare the multisets of lengths per time
    by_time: dict[float, list[tuple[int, int]]] = {}
    for e in rows:
        assert e.prompt_tokens is not None and e.output_tokens is not None
        by_time.setdefault(round((e.t_s - start) / speedup, 6), []).append(
            (e.prompt_tokens, e.output_tokens)
        )
    seen: dict[float, list[tuple[int, int]]] = {}
    for r in recs:
        t = truth[r.request_id]
        assert t["completion_tokens"] == r.max_tokens  # the engine wrote what the trace asked
        seen.setdefault(round((r.scheduled_at_ns - got[0]) / 1e9 + want[0], 6), []).append(
            (t["prompt_tokens"], t["max_tokens"])
        )
    assert {k: sorted(v) for k, v in seen.items()} == {k: sorted(v) for k, v in by_time.items()}
