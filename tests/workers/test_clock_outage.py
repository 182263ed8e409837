"""A shard measures its offset to the reference clock (Redis `TIME`) as the fleet starts, and the
coordinator reads it for the start time; a Redis restart at that moment (RELIABILITY C3) is
ridden through for up to 30 s, not the shard's end nor the run's. Against a real redis-server
killed and started again on the same port."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.celery_workers import RedisServer
from workers.clocks import MAX_UNCERTAINTY_NS, redis_clock, redis_now_ns


@contextlib.contextmanager
def redis_down_for(tmp_path: Path, seconds: float) -> Iterator[str]:
    """A real redis-server's URL, killed now and started again on its port `seconds` later."""
    server = RedisServer(tmp_path)
    restart = threading.Timer(seconds, server.start)
    try:
        server.kill()
        restart.start()
        yield server.url()
        restart.join()
    finally:
        restart.cancel()
        server.stop()


def test_the_clock_is_measured_through_a_redis_restart(tmp_path: Path) -> None:
    with redis_down_for(tmp_path, 1.5) as url:
        t0 = time.monotonic()
        estimate = redis_clock(url, ride_through_s=20.0)
        took = time.monotonic() - t0
    assert took >= 1.5, took  # it waited for the restart, then measured
    assert estimate.probes == 16 and estimate.uncertainty_ns < MAX_UNCERTAINTY_NS
    # the reference here is this host's own clock: the offset to it is within the bound
    assert abs(estimate.offset_wall_ns) < MAX_UNCERTAINTY_NS + estimate.uncertainty_ns


def test_a_redis_that_stays_down_ends_the_wait_with_its_error(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.kill()
    t0 = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        redis_clock(server.url(), ride_through_s=1.0)
    assert time.monotonic() - t0 < 10.0


def test_the_coordinators_start_reads_the_clock_through_a_restart(tmp_path: Path) -> None:
    """The coordinator's start time is Redis TIME plus the lead, read the same way."""
    with redis_down_for(tmp_path, 1.0) as url:
        now = redis_now_ns(url, ride_through_s=20.0)
    assert abs(now - time.time_ns()) < 1_000_000_000
