"""Each test's CPU time, its own process's and its reaped children's (a sim, a CLI command, a
server it started and stopped), recorded as the JUnit property `cpu_s`, so `make test` can
print the tests that cost the machine most (tests/phases.py). On 2 cores the parallel phase is
bound by CPU, not by waiting: its wall time follows the sum of these, not the slowest test.

A module- or session-scoped fixture's start is counted in its first test, its stop in its last.
"""

from __future__ import annotations

import resource
from collections.abc import Generator
from typing import Any

import pytest

CPU_PROPERTY = "cpu_s"
_STARTED = pytest.StashKey[float]()
_forked_cpu_s = [0.0]


def add_child_cpu(seconds: float) -> None:
    """CPU time of a process this one asked another to fork for it (tests/support/cli.py's
    commands, the children of its server): counted as if reaped here."""
    _forked_cpu_s[0] += seconds


def cpu_seconds() -> float:
    """User and system time of this process, of every child it has waited for, and of the
    commands forked for it."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + _forked_cpu_s[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None]:
    if call.when == "teardown" and _STARTED in item.stash:
        used = cpu_seconds() - item.stash[_STARTED]
        item.user_properties.append((CPU_PROPERTY, f"{used:.2f}"))
    yield
