"""Shared by the distributed tests: a small spec against the sim, the coordinator bound to the
test's Redis and store, and the ledger check over every shard of a run."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from loadgen.results.records import make_request_id
from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.support.stores import ledger_check
from workers.app import make_app
from workers.coordinator import Coordinator

CANARY_ENV = "PEAKLOAD_TEST_CANARY_KEY"


def make_spec(
    base_url: str,
    regions: list[tuple[str, float]],
    *,
    rate: float = 10.0,
    duration_s: float = 3.0,
    output_tokens: int = 8,
    api_key_env: str | None = None,
    name: str = "dist-test",
) -> RunSpec:
    return spec_from_dict(
        {
            "name": name,
            "target": {
                "api": "openai-chat",
                "base_url": base_url,
                "model": "sim",
                "api_key_env": api_key_env,
                "deadline_s": 30,
            },
            "workload": {"prompt_tokens": 16, "output_tokens": output_tokens, "seed": 3},
            "load": {"rate": [rate], "arrival": "constant", "duration_s": duration_s, "seed": 5},
            "regions": [{"name": n, "share": s} for n, s in regions],
        }
    )


def coordinator(env: dict[str, str], *, visibility_timeout_s: float | None = None) -> Coordinator:
    app = make_app(env["PEAKLOAD_REDIS_URL"], visibility_timeout_s=visibility_timeout_s)
    return Coordinator(env["PEAKLOAD_DATABASE_URL"], env["PEAKLOAD_REDIS_URL"], app)


def shards(conn: psycopg.Connection[Any], run_id: str) -> dict[str, dict[str, Any]]:
    cur = conn.execute(
        "SELECT shard_id, state, state_reason, requests_scheduled, records_written, "
        "fencing_token, start_skew_ns, clock_offset_ns, clock_uncertainty_ns, network_rtt_ns, "
        "extra FROM shards WHERE run_id = %s",
        (run_id,),
    )
    cols = [c.name for c in cur.description or []]
    return {r[0]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def run_status(conn: psycopg.Connection[Any], run_id: str) -> tuple[str, str | None]:
    row = conn.execute(
        "SELECT status, status_reason FROM runs WHERE run_id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return str(row[0]), row[1]


def ledger(
    conn: psycopg.Connection[Any], run_id: str, complete: list[str], killed: tuple[str, ...] = ()
) -> int:
    """The ledger check: shards in `complete` ended on their own, so each of their scheduled
    requests has exactly one row; `killed` shards' rows are checked by `killed_shard_rows` and
    must be the only other rows of the run."""
    rows = shards(conn, run_id)
    expected = [
        make_request_id(run_id, s, i)
        for s in complete
        for i in range(int(rows[s]["requests_scheduled"]))
    ]
    assert expected, "no requests were scheduled"
    for s in killed:
        killed_shard_rows(conn, run_id, s)
        expected += [
            str(r[0])
            for r in conn.execute(
                "SELECT request_id FROM requests WHERE run_id = %s AND shard_id = %s",
                (run_id, s),
            ).fetchall()
        ]
    return ledger_check(conn, run_id, expected)


def killed_shard_rows(conn: psycopg.Connection[Any], run_id: str, shard_id: str) -> int:
    """A killed shard's rows: no duplicates, each one of its own scheduled ids (a prefix of
    its schedule), and kept."""
    got = [
        str(r[0])
        for r in conn.execute(
            "SELECT request_id FROM requests WHERE run_id = %s AND shard_id = %s",
            (run_id, shard_id),
        ).fetchall()
    ]
    assert len(got) == len(set(got)), "duplicate rows for a killed shard"
    idx = conn.execute(
        "SELECT max(idx) FROM requests WHERE run_id = %s AND shard_id = %s", (run_id, shard_id)
    ).fetchone()
    top = int(idx[0]) + 1 if idx and idx[0] is not None else 0
    allowed = {make_request_id(run_id, shard_id, i) for i in range(top)}
    assert set(got) <= allowed
    return len(got)


def wait_for(pred: Any, timeout_s: float, what: str, poll_s: float = 0.1) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(poll_s)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
