"""`peakload worker --region R [--concurrency N]`: a Celery worker (prefork pool) consuming the
region's queue; each pool process runs shards on its own asyncio loop. `--control` consumes the
control queue (scheduled runs' coordination) and `--beat` runs the PostgreSQL-backed beat.

A worker reaches the target through `--target-override URL` (or PEAKLOAD_TARGET_OVERRIDE) when
set: e.g. a latency proxy standing in for the region's network path. Redis from
PEAKLOAD_REDIS_URL, the store from PEAKLOAD_DATABASE_URL. `--metrics-port` serves the shards'
live metrics (workers.metrics_serve).
"""

from __future__ import annotations

import os
import re
import sys

import click


def celery_argv(
    region: str | None, concurrency: int, *, control: bool, beat: bool, loglevel: str
) -> list[str]:
    """The `celery` command line this worker runs (exec'd, so signals reach Celery directly)."""
    base = [sys.executable, "-m", "celery", "-A", "workers.app"]
    if beat:
        return [*base, "beat", "-S", "workers.schedules:PgScheduler", "--loglevel", loglevel]
    from workers.app import SCHEDULER_QUEUE, region_queue

    queues = [region_queue(region)] if region else []
    if control:
        queues.append(SCHEDULER_QUEUE)
    name = f"{region or 'control'}.{os.getpid()}@%h"
    return [
        *base,
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "-Q",
        ",".join(queues),
        "-n",
        name,
        "-E",
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        loglevel,
    ]


@click.command("worker")
@click.option("--region", help="the region whose shards this worker runs (queue region.<R>)")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="pool processes: shards run at once",
)
@click.option(
    "--target-override",
    metavar="URL",
    help="base URL to reach the target through (e.g. this region's latency proxy)",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="live Prometheus metrics of the shards run here (PEAKLOAD_METRICS_PORT); 0: a free "
    "port per pool process (needed with --concurrency > 1), logged and stored with each shard",
)
@click.option(
    "--metrics-host",
    default=None,
    help="address the metrics server binds (PEAKLOAD_METRICS_HOST; default 127.0.0.1)",
)
@click.option("--control", is_flag=True, help="also consume the control queue")
@click.option("--beat", is_flag=True, help="run the schedule beat instead of a worker")
@click.option("--loglevel", default="info", show_default=True)
def worker_command(
    region: str | None,
    concurrency: int,
    target_override: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
    control: bool,
    beat: bool,
    loglevel: str,
) -> None:
    """Start a region worker (or the control worker, or the beat)."""
    if not (region or control or beat):
        raise click.UsageError("give --region R, --control or --beat")
    if region and not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", region):
        raise click.BadParameter(f"not a region name: {region!r}", param_hint="--region")
    target_override = target_override or os.environ.get("PEAKLOAD_TARGET_OVERRIDE") or None
    if target_override:
        if not target_override.startswith(("http://", "https://")):
            raise click.BadParameter(
                "must start with http:// or https://", param_hint="--target-override"
            )
        from loadgen.targets import policy_from_env

        # load goes wherever the override points: the same policy as a spec's target (each
        # shard checks again, for a variable set behind this command's back)
        policy_from_env().check(target_override)
        os.environ["PEAKLOAD_TARGET_OVERRIDE"] = target_override
    if metrics_port is not None:  # read by each pool process (workers.metrics_serve)
        if metrics_port and concurrency > 1:
            raise click.BadParameter(
                f"one port cannot serve {concurrency} pool processes: give 0 (a free port each)",
                param_hint="--metrics-port",
            )
        os.environ["PEAKLOAD_METRICS_PORT"] = str(metrics_port)
    if metrics_host:
        os.environ["PEAKLOAD_METRICS_HOST"] = metrics_host
    argv = celery_argv(region, concurrency, control=control, beat=beat, loglevel=loglevel)
    os.execv(argv[0], argv)  # noqa: S606 -- a fixed argv, no shell involved
