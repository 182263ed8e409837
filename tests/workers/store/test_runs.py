"""Run bookkeeping: a run, its levels and shards go in and come back as given; the stored target
URL has no query or credentials; unknown states and missing runs are clear errors."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from loadgen.errors import StoreError
from loadgen.results.records import Batch
from loadgen.runspec.spec import spec_from_dict
from tests.workers.store._records import make_records
from workers.store import runs
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

SPEC = {
    "name": "bookkeeping",
    "target": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:9/v1?deployment=blue",
        "model": "m1",
        "api_key_env": "SOME_KEY",
    },
    "load": {"concurrency": [1, 4], "duration_s": 5},
    "labels": {"engine": "sim", "hardware": "cpu", "team": "perf"},
}


def test_run_levels_and_shards_round_trip(store_url: str, tmp_path: object) -> None:
    spec = spec_from_dict(SPEC)
    run_id = str(uuid.uuid4())
    with psycopg.connect(store_url) as conn:
        runs.create_run(conn, run_id, spec, mode="local")
        runs.create_run(conn, run_id, spec, mode="local")  # idempotent
        runs.upsert_levels(conn, run_id, [
            {"level": 0, "kind": "concurrency", "value": 1, "duration_s": 5},
            {"level": 1, "kind": "concurrency", "value": 4, "duration_s": 5, "warmup_s": 1},
        ])  # fmt: skip
        runs.upsert_levels(conn, run_id, [
            {"level": 0, "kind": "concurrency", "value": 1, "duration_s": 5,
             "started_at_ns": 1_795_000_000_000_000_000,
             "ended_at_ns": 1_795_000_005_000_000_000},
        ])  # fmt: skip
        runs.upsert_shard(conn, run_id, "local-0", "local", 0, {"shard_id": "local-0"},
                          requests_scheduled=50)  # fmt: skip
        runs.start_run(conn, run_id)
        runs.set_shard_state(conn, run_id, "local-0", "running")
        writer = StoreWriter(store_url, run_id, WriterConfig(spool_dir=f"{tmp_path}/spool"))
        writer.write(Batch(make_records(run_id, 50, shard_id="local-0")))
        writer.close()
        assert runs.count_requests(conn, run_id) == 50
        runs.set_shard_state(conn, run_id, "local-0", "completed", valid=True,
                             invalid_reasons=[], records_written=50)  # fmt: skip
        runs.finish_run(conn, run_id, "completed", False, ["loop lag p99 3 ms > 2 ms"], 50)
        run = conn.execute(
            "SELECT name, mode, status, valid, invalid_reasons, api, target_url, model, labels, "
            "spec->'target'->>'api_key_env', requests_scheduled, started_at IS NOT NULL, "
            "ended_at IS NOT NULL, store_content FROM runs WHERE run_id = %s",
            (run_id,),
        ).fetchall()
        assert run == [("bookkeeping", "local", "completed", False,
                        ["loop lag p99 3 ms > 2 ms"], "openai-chat", "http://127.0.0.1:9/v1",
                        "m1", {"engine": "sim", "hardware": "cpu", "team": "perf",
                               "generation": {}},
                        "SOME_KEY", 50, True, True, False)]  # fmt: skip
        levels = conn.execute(
            "SELECT level, value, warmup_s, extract(epoch FROM ended_at - started_at) "
            "FROM run_levels WHERE run_id = %s ORDER BY level",
            (run_id,),
        ).fetchall()
        assert [(lv, v, w) for lv, v, w, _ in levels] == [(0, 1.0, 0.0), (1, 4.0, 1.0)]
        assert float(levels[0][3]) == pytest.approx(5.0)
        assert levels[1][3] is None
        shard = conn.execute(
            "SELECT state, valid, records_written, requests_scheduled, started_at <= ended_at "
            "FROM shards WHERE run_id = %s",
            (run_id,),
        ).fetchall()
        assert shard == [("completed", True, 50, 50, True)]


def test_public_target_url_drops_secrets() -> None:
    assert runs.public_target_url("https://u:p@api.example.com:8443/v1?key=k#f") == (
        "https://api.example.com:8443/v1"
    )
    assert runs.public_target_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_bad_states_and_missing_runs_are_clear_errors(
    plain_url: str, fresh_database: object
) -> None:
    db = fresh_database(plain_url)  # type: ignore[operator]
    with psycopg.connect(db.url) as conn:
        with pytest.raises(StoreError, match="unknown run status 'done'"):
            runs.set_run_status(conn, str(uuid.uuid4()), "done")
        with pytest.raises(StoreError, match=r"no run .* in the store"):
            runs.start_run(conn, str(uuid.uuid4()))
        with pytest.raises(StoreError, match=r"level entry \[0\] is malformed"):
            runs.upsert_levels(conn, str(uuid.uuid4()), [{"level": 0}])
