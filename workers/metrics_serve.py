"""A worker process's live metrics server (loadgen.engine.livemetrics): started on the first shard
the process runs when PEAKLOAD_METRICS_PORT is set (`peakload worker --metrics-port`), kept for
the process's life, so every shard it runs is counted under its run and region labels (the
series of its last RUNS_KEPT ended runs: its memory and scrapes do not grow with its age).

One server per process: a prefork pool with `--concurrency` > 1 needs port 0 (each pool process
picks a free port; each shard's check-in stores its URL as `metrics_url`), since a fixed port can
be bound by one process only. A server that cannot listen is logged, never a shard's failure.
"""

from __future__ import annotations

import logging
import os

from loadgen.engine.livemetrics import LiveMetrics
from loadgen.errors import MetricsError

log = logging.getLogger(__name__)

RUNS_KEPT = 20  # a long-lived worker serves the series of its last 20 ended runs
_served: dict[int, LiveMetrics] = {}  # by pid: a forked child does not inherit a live server


def process_metrics(port: int | None, host: str) -> LiveMetrics | None:
    """This process's started LiveMetrics (started now on first use), or None when no port is
    configured or it could not listen."""
    if port is None:
        return None
    pid = os.getpid()
    if pid not in _served:
        live = LiveMetrics(keep_runs=RUNS_KEPT)
        try:
            live.start(port, host)
        except MetricsError as exc:
            log.warning("live metrics off in process %s: %s", pid, exc)
            return None
        log.info("live metrics of process %s at %s", pid, live.url)
        _served[pid] = live
    return _served[pid]
