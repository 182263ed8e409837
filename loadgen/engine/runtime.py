"""How a measuring process runs its event loop: the standard asyncio loop (uvloop when
`PEAKLOAD_LOOP=uvloop`), a short GIL switch interval so a helper thread (the store writer)
holds the loop back by at most ~0.25 ms instead of CPython's default 5 ms, and a collector that
pauses rarely: what exists before the run is frozen out of its scans, and the young generation
is collected every 20,000 allocations instead of 700 (the run's objects die by reference count;
only the few cycles wait longer). A 20 ms full collection is 20 ms no socket is read."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GIL_SWITCH_INTERVAL_S = 0.00025
GC_THRESHOLDS = (20_000, 20, 50)


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
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(coro)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
