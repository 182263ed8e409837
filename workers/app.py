"""The Celery app: Redis broker, JSON only, one queue per region (`region.<name>`), prefetch 1,
explicit time limits. Redis is only the broker; every piece of run state lives in PostgreSQL.
Environment: PEAKLOAD_REDIS_URL (default redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger
from kombu import Queue  # type: ignore[attr-defined]

from loadgen.scrub import scrub_logging

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TASK_RUN_SHARD = "peakload.run_shard"
TASK_SCHEDULE_TICK = "peakload.schedule_tick"
TASK_REAP = "peakload.reap"
TASK_START_RUN = "peakload.start_run"
SCHEDULER_QUEUE = "peakload.control"

# Backstop limits for a task sent without its own (the coordinator always sends its own,
# derived from the shard's planned duration: see `shard_time_limits`).
DEFAULT_SOFT_TIME_LIMIT_S = 6 * 3600
DEFAULT_HARD_TIME_LIMIT_S = DEFAULT_SOFT_TIME_LIMIT_S + 300
# Slack added to a shard's planned duration: readiness wait, warm-up, start lead, flush.
TIME_LIMIT_SLACK_S = 180.0
HARD_AFTER_SOFT_S = 60.0  # between the soft limit (flush, mark timed_out) and the hard kill
# Unacked messages come back after this long. Shards are acked on receipt (see task_acks_late)
# so this only governs messages reserved but never started.
VISIBILITY_TIMEOUT_S = 3600


def redis_url() -> str:
    return os.environ.get("PEAKLOAD_REDIS_URL") or DEFAULT_REDIS_URL


def region_queue(region: str) -> str:
    return f"region.{region}"


def shard_time_limits(planned_duration_s: float) -> tuple[float, float]:
    """(soft, hard) limits in seconds for a shard whose levels last `planned_duration_s`."""
    soft = planned_duration_s + TIME_LIMIT_SLACK_S
    return soft, soft + HARD_AFTER_SOFT_S


def make_app(broker_url: str | None = None, *, visibility_timeout_s: float | None = None) -> Celery:
    url = broker_url or redis_url()
    vt = visibility_timeout_s
    if vt is None:
        vt = float(os.environ.get("PEAKLOAD_VISIBILITY_TIMEOUT_S", VISIBILITY_TIMEOUT_S))
    app = Celery("peakload", broker=url, include=["workers.tasks"])
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        # no result backend: outcomes are rows in PostgreSQL, never values in Redis
        result_backend=None,
        task_ignore_result=True,
        task_default_queue=SCHEDULER_QUEUE,
        task_queues=[Queue(SCHEDULER_QUEUE)],  # type: ignore[no-untyped-call]
        task_create_missing_queues=True,  # region.<name> queues appear as workers subscribe
        worker_prefetch_multiplier=1,
        # Early ack (below) releases a message's prefetch slot as soon as its shard starts, so
        # a busy worker would reserve one more shard it cannot start, and that shard would never
        # check in. A worker takes a message only when a pool process is free.
        worker_disable_prefetch=True,
        # Early ack, on purpose. A shard must run at most once: if a worker dies mid-shard, a
        # late-acked message would be redelivered and run again against the target. With early
        # ack the broker forgets the message once a worker starts it; the fencing lease in
        # PostgreSQL (workers/leases.py) refuses any duplicate that still arrives (a restored
        # Redis, a re-sent task), and the reaper marks a dead worker's shard `interrupted`.
        task_acks_late=False,
        task_reject_on_worker_lost=False,
        task_soft_time_limit=DEFAULT_SOFT_TIME_LIMIT_S,
        task_time_limit=DEFAULT_HARD_TIME_LIMIT_S,
        broker_transport_options={
            "visibility_timeout": vt,
            "socket_keepalive": True,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
            "retry_on_timeout": True,
        },
        # C3: a worker started before Redis, or losing it mid-run, keeps retrying forever
        broker_connection_retry_on_startup=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        broker_heartbeat=0,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        beat_scheduler="celery.beat:PersistentScheduler",
        timezone="UTC",
        enable_utc=True,
    )
    return app


def _scrub_worker_logs(logger: logging.Logger, **_: Any) -> None:
    """A worker's log lines pass through loadgen.scrub (a shard's errors quote servers)."""
    scrub_logging(logger)
    scrub_logging()


after_setup_logger.connect(_scrub_worker_logs, weak=False)
after_setup_task_logger.connect(_scrub_worker_logs, weak=False)
app = make_app()
