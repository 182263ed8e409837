"""The end of a local run (workers/local.py): each shard's final state (a shard whose measuring
process handed in nothing ends `failed`, its rows kept), the pooled levels and search, and the
run's status and validity, written to the store and returned as a `LocalRun`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.engine.runner import ShardResult
from loadgen.errors import RunFailed
from loadgen.runspec.spec import RunSpec
from workers.store import runs as store_runs
from workers.store.runs import level_row


@dataclass(slots=True)
class LocalRun:
    run_id: str
    status: str  # completed | partial | aborted | failed
    valid: bool
    invalid_reasons: list[str]
    requests_scheduled: int
    tokens_per_word: float
    shards: list[ShardResult]


def finish_local_run(
    conn: Any,
    run_id: str,
    spec: RunSpec,
    results: list[ShardResult],
    tpw: float,
    writer_error: Exception | None,
    *,
    lost: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> LocalRun:
    """The shards' final states (a shard in `lost` ended `failed`: its process handed in
    nothing, its rows are kept), the pooled levels and search, the run's status."""
    lost, labels = lost or {}, labels or {}
    written = store_runs.count_requests_by_shard(conn, run_id)
    for sid, why in sorted(lost.items()):
        n = written.get(sid, 0)
        store_runs.set_shard_state(
            conn, run_id, sid, "failed", reason=why, valid=False, invalid_reasons=[why],
            requests_scheduled=n, records_written=n,
        )  # fmt: skip
    for r in results:
        store_runs.set_shard_state(
            conn,
            run_id,
            r.shard_id,
            r.status,
            valid=r.valid,
            invalid_reasons=r.invalid_reasons,
            requests_scheduled=r.requests_scheduled,
            records_written=written.get(r.shard_id, 0),
            # the self-check's figures, under the keys a distributed shard stores them
            extra={"outcomes": dict(r.outcomes), "health": dict(r.health)},
        )
    if any(r.levels for r in results):
        store_runs.upsert_levels(
            conn,
            run_id,
            store_runs.merge_levels([[level_row(lv) for lv in r.levels] for r in results]),
        )
    store_runs.set_search(
        conn, run_id, {r.shard_id: r.search for r in results if r.search is not None}
    )
    reasons = [
        f"{r.shard_id}{f' ({labels[r.shard_id]})' if r.shard_id in labels else ''}: {why}"
        for r in results
        for why in r.invalid_reasons
    ]
    reasons += [f"{sid}: {why}" for sid, why in sorted(lost.items())]
    statuses = {r.status for r in results} | ({"failed"} if lost else set())
    status = (
        "completed"
        if statuses == {"completed"}
        else "aborted"
        if "aborted" in statuses
        else "partial"
    )
    if writer_error is not None:
        status = "failed"
        reasons.append(f"store writer: {writer_error}")
    scheduled = sum(r.requests_scheduled for r in results)
    scheduled += sum(written.get(sid, 0) for sid in lost)
    valid = not reasons
    store_runs.finish_run(conn, run_id, status, valid, reasons, scheduled)
    if writer_error is not None:
        raise RunFailed(run_id, f"store writer: {writer_error}") from writer_error
    return LocalRun(run_id, status, valid, reasons, scheduled, tpw, results)
