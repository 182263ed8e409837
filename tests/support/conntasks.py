"""The open connections of a loopback test server (a proxy, a scripted target), as the asyncio
tasks that serve them: `run` serves one connection as a tracked task, `cancel_all` ends every one
still open at shutdown and waits for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ConnectionTasks:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    async def run(
        self, handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """`handler(reader, writer)`, tracked as the current task until it returns or raises."""
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await handler(reader, writer)
        finally:
            self.tasks.discard(task)

    async def cancel_all(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
