"""A local run that fails while its store is down is marked `failed` by the run itself once the
store answers again, not left `running` for the lease to end later (#28 point 5); past the
retry bound, the failure it raises says the store could not be told."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from loadgen.errors import RunFailed
from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import SimProcess
from tests.support.stores import host_port, with_hostport
from tests.support.tcpproxy import TcpProxy
from workers import local, local_failure

pytestmark = pytest.mark.integration


def spec(base_url: str) -> Any:
    return spec_from_dict(
        {
            "name": "store-down",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "m"},
            "workload": {"prompt_tokens": 8, "output_tokens": 4},
            "load": {"concurrency": [1], "duration_s": 1.0},
        }
    )


def run_status(url: str, run_id: str) -> tuple[str, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status, coalesce(status_reason, '') FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def failing_run(
    sim: SimProcess, store_url: str, proxy: TcpProxy, down_s: float
) -> tuple[str, RunFailed]:
    """A run whose store goes down (open connections reset, new ones held) the moment the run
    exists, and which then fails; the store comes back after `down_s`."""
    seen: list[str] = []
    back = threading.Timer(down_s, proxy.resume)

    def boom(run_id: str) -> None:
        seen.append(run_id)
        proxy.pause()
        proxy.reset_all()
        back.start()
        raise RuntimeError("boom")

    proxied = with_hostport(store_url, "127.0.0.1", proxy.port)
    try:
        with pytest.raises(RunFailed) as e:
            local.run_local(spec(sim.base_url), database_url=proxied, on_started=boom)
    finally:
        back.cancel()
    proxy.resume()
    return seen[0], e.value


def test_the_run_is_failed_when_the_store_comes_back(sim: SimProcess, store_url: str) -> None:
    with TcpProxy(*host_port(store_url)) as proxy:
        run_id, exc = failing_run(sim, store_url, proxy, down_s=1.5)
        assert exc.reason == "RuntimeError: boom"
        # before the fix: the error was suppressed and the row said `running`
        assert run_status(store_url, run_id) == ("failed", "RuntimeError: boom")


def test_past_the_bound_the_failure_says_the_store_was_not_told(
    sim: SimProcess, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_failure, "FAIL_RETRY_S", 1.0)
    with TcpProxy(*host_port(store_url)) as proxy:
        run_id, exc = failing_run(sim, store_url, proxy, down_s=15.0)
        assert exc.reason.startswith("RuntimeError: boom; the store could not be told (")
        assert "the run row keeps its status until its lease expires" in exc.reason
        assert run_status(store_url, run_id)[0] == "pending"  # the lease ends it later
