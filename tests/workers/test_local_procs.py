"""`peakload run --processes N` on real parts (the sim on loopback, the embedded PostgreSQL and
TimescaleDB stores): one run from several measuring processes, levels isolated across them, a
search decided on everyone's samples, a killed process leaving the run `partial` with its rows,
a stalled one named by the self-check."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loadgen.results.records import Tick, make_request_id
from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.support.sim import SimProcess
from tests.support.stores import ledger_check
from workers.local import run_local
from workers.local_finish import LocalRun

pytestmark = [pytest.mark.integration, pytest.mark.one_store]  # tests/support/stores.py


def make_spec(base_url: str, load: dict[str, Any], **rest: Any) -> RunSpec:
    return spec_from_dict(
        {
            "name": "procs",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "m"},
            "workload": {"prompt_tokens": 16, "output_tokens": 8},
            "load": load,
            **rest,
        }
    )


def measuring() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("peakload-measure")]


def shard_rows(url: str, run_id: str) -> dict[str, tuple[str, str | None, int, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT shard_id, state, state_reason, requests_scheduled, records_written "
            "FROM shards WHERE run_id = %s",
            (run_id,),
        ).fetchall()
    return {str(r[0]): (str(r[1]), r[2], int(r[3] or 0), int(r[4] or 0)) for r in rows}


def expected_ids(run_id: str, scheduled: dict[str, int]) -> list[str]:
    return [
        str(make_request_id(run_id, sid, i, 0)) for sid, n in scheduled.items() for i in range(n)
    ]


def test_two_processes_make_one_run_with_levels_isolated_across_them(
    sim: SimProcess, store_url: str
) -> None:
    spec = make_spec(sim.base_url, {"concurrency": [4, 8], "duration_s": 1.5, "warmup_s": 0.3})
    seen: set[int] = set()

    def on_tick(_t: Tick) -> None:  # ticks reach the parent while the children measure
        seen.update(p.pid for p in measuring() if p.pid is not None)

    result = run_local(spec, database_url=store_url, processes=2, on_tick=on_tick)
    assert result.status == "completed", result.invalid_reasons
    assert len(seen) == 2 and os.getpid() not in seen
    assert sorted(s.shard_id for s in result.shards) == ["local-0", "local-1"]
    rows = shard_rows(store_url, result.run_id)
    assert {sid: r[0] for sid, r in rows.items()} == {
        "local-0": "completed",
        "local-1": "completed",
    }
    with psycopg.connect(store_url) as conn:
        n = ledger_check(
            conn, result.run_id, expected_ids(result.run_id, {s: r[2] for s, r in rows.items()})
        )
        assert n == result.requests_scheduled > 0
        # under `drain` no request of level 1, in either process, left before every request of
        # level 0, in both, had ended (one wall anchor for all processes: comparable to the µs)
        first_sent, last_end, shards_1 = conn.execute(
            "SELECT min(extract(epoch FROM scheduled_at) * 1e6 + sent_ns / 1e3) "
            "FILTER (WHERE level = 1), "
            "max(extract(epoch FROM scheduled_at) * 1e6 + end_ns / 1e3) FILTER (WHERE level = 0), "
            "count(DISTINCT shard_id) FILTER (WHERE level = 1) "
            "FROM requests WHERE run_id = %s",
            (result.run_id,),
        ).fetchone() or (None, None, 0)
    assert shards_1 == 2
    assert first_sent is not None and last_end is not None
    assert float(first_sent) >= float(last_end) - 1.0, (first_sent, last_end)
    assert not measuring()  # every child reaped
    # each process's self-check figures are stored with its shard, as a distributed shard's are
    with psycopg.connect(store_url) as conn:
        extras = dict(
            conn.execute(
                "SELECT shard_id, extra FROM shards WHERE run_id = %s", (result.run_id,)
            ).fetchall()
        )
    for shard in result.shards:
        stored = extras[shard.shard_id]
        assert stored["health"] == pytest.approx(dict(shard.health)), shard.shard_id
        assert stored["health"]["loop_lag_p99_ms"] >= 0 and "late_s" in stored["health"]
        assert stored["outcomes"] == dict(shard.outcomes) and sum(shard.outcomes.values()) > 0


def test_a_saturation_search_decides_on_the_samples_of_every_process(
    sim: SimProcess, store_url: str
) -> None:
    spec = make_spec(
        sim.base_url,
        {
            "saturation": {"start": 10, "max": 20, "max_steps": 2, "confidence": 0.9},
            "arrival": "constant",
            "duration_s": 1.5,
            "warmup_s": 0.2,
            "cooldown_s": 0.1,
        },
        slos=[{"metric": "ttft_ms", "percentile": 90, "threshold": 1000}],
    )
    result = run_local(spec, database_url=store_url, processes=2)
    assert result.status == "completed", result.invalid_reasons
    a, b = sorted(result.shards, key=lambda s: s.shard_id)
    assert a.search is not None and b.search is not None
    assert a.search == b.search and a.search["pooled"] and a.search["pool_complete"]
    assert len(a.levels) == len(b.levels) >= 2
    for la, lb in zip(a.levels, b.levels, strict=True):
        assert la.search is not None and lb.search is not None
        assert la.search["pool"] == {"shards": ["local-0", "local-1"], "missing": []}
        assert la.search["slos"] == lb.search["slos"]  # one verdict on the pooled samples
    with psycopg.connect(store_url) as conn:
        own = conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = %s AND shard_id = 'local-0' "
            "AND level = 0 AND phase = 'steady' AND outcome = 'ok'",
            (result.run_id,),
        ).fetchone()
    assert own is not None
    # the first level's verdict counted both processes' steady samples, not its own alone
    assert a.levels[0].search is not None
    assert a.levels[0].search["slos"][0]["n"] > int(own[0]) > 0


def run_in_thread(spec: RunSpec, url: str, **kw: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def main() -> None:
        try:
            out.append(run_local(spec, database_url=url, processes=2, **kw))
        except BaseException as exc:  # reported by the test
            out.append(exc)

    t = threading.Thread(target=main, daemon=True)
    t.start()
    return t, out


def _stored(url: str, run_ids: set[str], shard_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = ANY(%s::uuid[]) AND shard_id = %s",
            (list(run_ids), shard_id),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_for_ticks(
    ticked: threading.Event, out: list[Any]
) -> list[multiprocessing.process.BaseProcess]:
    end = time.monotonic() + 60
    while not ticked.wait(0.1):
        assert not out, f"the run ended before any tick: {out[0]!r}"
        assert time.monotonic() < end, "no tick from the measuring processes"
    procs = sorted(measuring(), key=lambda p: p.name)
    assert len(procs) == 2
    return procs


def test_a_killed_process_leaves_the_run_partial_with_its_rows_kept(
    sim: SimProcess, store_url: str
) -> None:
    spec = make_spec(sim.base_url, {"concurrency": [8], "duration_s": 6.0, "warmup_s": 0.3})
    ticked = threading.Event()
    run_ids: set[str] = set()

    def on_tick(tick: Any) -> None:
        run_ids.add(tick.run_id)
        ticked.set()

    thread, out = run_in_thread(spec, store_url, on_tick=on_tick)
    procs = wait_for_ticks(ticked, out)
    # killed once it has stored some rows (how soon depends on this host's speed, not a sleep)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and not _stored(store_url, run_ids, "local-1"):
        time.sleep(0.05)
    victim = procs[1]  # measuring process 1 holds local-1
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive()
    result = out[0]
    assert isinstance(result, LocalRun), result
    assert result.status == "partial"
    rows = shard_rows(store_url, result.run_id)
    state, reason, _, written = rows["local-1"]
    assert state == "failed"
    assert reason == f"measuring process 1 died (pid {victim.pid}, SIGKILL)"
    assert written > 0  # what it wrote before it died is kept
    assert any("local-1: measuring process 1 died" in r for r in result.invalid_reasons)
    assert rows["local-0"][0] == "completed"
    with psycopg.connect(store_url) as conn:
        kept = [
            str(r[0])
            for r in conn.execute(
                "SELECT request_id FROM requests WHERE run_id = %s AND shard_id = 'local-1'",
                (result.run_id,),
            ).fetchall()
        ]
        assert len(kept) == written
        # the surviving process: every scheduled request exactly once; no row twice anywhere
        ledger_check(
            conn, result.run_id, expected_ids(result.run_id, {"local-0": rows["local-0"][2]}) + kept
        )
    assert not measuring()


def test_the_self_check_names_the_process_that_was_late(sim: SimProcess, store_url: str) -> None:
    # Open loop: a send's due time is fixed by the schedule, so a held loop makes its sends late
    # (in a closed loop the next send is due only when the loop sees the slot free, and kernel
    # stamps keep the arrivals exact through a stop: such a run is rightly valid).
    load = {"rate": [60.0], "arrival": "constant", "duration_s": 4.0, "warmup_s": 0.3}
    spec = make_spec(sim.base_url, load)
    ticked = threading.Event()
    thread, out = run_in_thread(spec, store_url, on_tick=lambda _t: ticked.set())
    procs = wait_for_ticks(ticked, out)
    late = procs[0]
    assert late.pid is not None
    os.kill(late.pid, signal.SIGSTOP)  # held for 300 ms: ~9 of its ~120 sends leave late
    time.sleep(0.3)
    os.kill(late.pid, signal.SIGCONT)
    assert not out, "the run ended before its process was held: the test proved nothing"
    thread.join(60)
    result = out[0]
    assert isinstance(result, LocalRun), result
    assert not result.valid
    assert any(r.startswith("local-0 (measuring process 0): ") for r in result.invalid_reasons)
    held = next(s for s in result.shards if s.shard_id == "local-0")
    assert not held.valid


def test_children_do_not_run_the_parent_s_main_script(
    sim: SimProcess, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a Streamlit server (a run started from the Launch page) `__main__` is a page script;
    spawned children must not run it again (multiprocessing's spawn would, as `__mp_main__`)."""
    marker = tmp_path / "ran"
    script = tmp_path / "page.py"
    script.write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    page = types.ModuleType("__main__")
    page.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", page)
    spec = make_spec(sim.base_url, {"concurrency": [2], "duration_s": 0.5, "warmup_s": 0.1})
    result = run_local(spec, database_url=store_url, processes=2)
    assert result.status == "completed", result.invalid_reasons
    assert not marker.exists(), marker.read_text()
    assert sys.modules["__main__"] is page  # the parent's own is back
