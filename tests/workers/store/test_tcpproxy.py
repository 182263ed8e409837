"""The test TCP proxy itself: bytes pass unchanged, latency is added per direction, pause holds
traffic until resume, reset_all breaks open connections."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.tcpproxy import TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def _roundtrip(port: int, payload: bytes, timeout: float = 5) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got, time.perf_counter() - t0


def test_bytes_pass_and_latency_is_added(echo_port: int) -> None:
    payload = bytes(range(256)) * 400
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        got, _ = _roundtrip(proxy.port, payload)
        assert got == payload
        proxy.set_latency(up_ms=100, down_ms=50)
        _, rtt = _roundtrip(proxy.port, b"ping")
        assert rtt >= 0.15


def test_pause_holds_traffic_until_resume(echo_port: int) -> None:
    with (
        TcpProxy("127.0.0.1", echo_port) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s,
    ):
        s.sendall(b"a")
        assert s.recv(1) == b"a"
        proxy.pause()
        s.sendall(b"b")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(1)
        proxy.resume()
        s.settimeout(5)
        assert s.recv(1) == b"b"


def test_reset_all_breaks_open_connections(echo_port: int) -> None:
    with (
        TcpProxy("127.0.0.1", echo_port) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s,
    ):
        s.sendall(b"a")
        assert s.recv(1) == b"a"
        proxy.reset_all()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(50):
                if not s.recv(1):
                    raise ConnectionResetError("closed")
                time.sleep(0.01)
