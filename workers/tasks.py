"""Celery tasks, each like a web view: unpack JSON arguments, call plain functions, report.
No logic lives here that cannot run without a broker."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from loadgen.engine.plan import ShardPlan
from workers.app import TASK_REAP, TASK_RUN_SHARD, TASK_START_RUN, app

# At module level on purpose: a worker imports this module before it forks its pool, so each
# pool process starts with a shard's whole code loaded. Imported inside the task, the shards of
# a fleet's first run, all arriving at once (64 on 2 cores), each paid ~0.6 CPU-s cold, some of
# it after claiming their lease.
from workers.shard_exec import WorkerSettings, execute_shard

log = logging.getLogger(__name__)


@app.task(name=TASK_RUN_SHARD, bind=True, ignore_result=True)  # type: ignore[untyped-decorator]
def run_shard_task(
    self: Task,
    plan: dict[str, Any],
    soft_limit_s: float | None = None,
    tokens_per_word: float = 1.0,
) -> dict[str, Any]:
    """Run one shard plan (its JSON) on this worker; refuses if the shard was already claimed."""
    shard = ShardPlan.from_json(plan)
    report = execute_shard(
        shard, WorkerSettings.from_env(), soft_limit_s=soft_limit_s, tokens_per_word=tokens_per_word
    )
    log.info("shard %s/%s: %s", shard.run_id, shard.shard_id, report)
    return report


@app.task(name=TASK_START_RUN, ignore_result=True)  # type: ignore[untyped-decorator]
def start_run_task(run_id: str) -> str:
    """Dispatch and coordinate a run already created in the store (scheduled runs)."""
    from workers.coordinator import Coordinator

    return Coordinator.from_env().launch_existing(run_id).status


@app.task(name=TASK_REAP, ignore_result=True)  # type: ignore[untyped-decorator]
def reap_task() -> int:
    """Interrupt shards whose lease expired and end their runs."""
    from workers.coordinator import reap_and_finalize
    from workers.store.connect import connect_store

    with connect_store(autocommit=True) as conn:
        return len(reap_and_finalize(conn))
