"""An asyncio TCP server whose loop runs in a daemon thread, for the test proxies
(tests.support.httpproxy, tcpproxy): `start()` returns once it listens on `listen_host:port`
(port 0: chosen by the kernel), `stop()` runs the subclass's `_shutdown` in the loop, then
stops the loop and joins the thread; a `with` block does both."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopServer:
    """Subclasses define `_accept` (one connection) and `_shutdown` (close what is open)."""

    def __init__(self, name: str, listen_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        self.name = name
        self.listen_host, self.port = listen_host, listen_port
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, self.listen_host, self.port)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._thread is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            await self._shutdown()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None
        self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
