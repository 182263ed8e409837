"""How a measuring process runs its event loop: the standard asyncio loop (uvloop when
`PEAKLOAD_LOOP=uvloop`), and a short GIL switch interval so a helper thread (the store writer)
holds the loop back by at most ~0.25 ms instead of CPython's default 5 ms, a delay that would
otherwise land in every stamp."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GIL_SWITCH_INTERVAL_S = 0.00025


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if os.environ.get("PEAKLOAD_LOOP", "asyncio") != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run_measurement(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh loop tuned for stamping accuracy."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
