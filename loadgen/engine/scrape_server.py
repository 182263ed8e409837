"""The HTTP endpoint a scraper reads a registry from (`--metrics-port`), and the log of the
scrapes it answered: when each began, when its answer was written, and whether that was within
the time the scraper said it would wait (Prometheus sends it with every scrape as
X-Prometheus-Scrape-Timeout-Seconds). A scrape answered after that time was thrown away by the
scraper, so a run that waits for "a final scrape" waits for one answered in time.

The exposition itself is prometheus_client's WSGI app; the server is the standard library's,
one thread per request, as prometheus_client serves it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

TIMEOUT_HEADER = "HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS"  # the WSGI name of the header
ACCEPTED_KEY = "peakload.accepted_ns"  # environ: when the server accepted the connection
IN_TIME_SHARE = 0.9  # of the stated timeout: the answer's trip back and the scraper's clock


class ScrapeLog:
    """The latest scrape answered in time: `last_kept_ns` is when it began (perf_counter_ns,
    at accept; every value it carried was read after that). In time is within
    IN_TIME_SHARE of the timeout the scraper stated; one without a stated timeout counts as
    kept once answered."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.last_kept_ns = 0
        self.answered = 0
        self.late = 0

    def note(self, began_ns: int, ended_ns: int, timeout_s: float | None) -> None:
        in_time = timeout_s is None or ended_ns - began_ns <= timeout_s * IN_TIME_SHARE * 1e9
        with self.cond:
            self.answered += 1
            if not in_time:
                self.late += 1
                return
            self.last_kept_ns = max(self.last_kept_ns, began_ns)
            self.cond.notify_all()

    def wait_kept_after(self, mark_ns: int, timeout_s: float) -> bool:
        """Block until a scrape that began after `mark_ns` was answered in time, at most
        `timeout_s`; True if one was."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.last_kept_ns <= mark_ns:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


def _stated_timeout(environ: dict[str, Any]) -> float | None:
    try:
        value = float(environ.get(TIMEOUT_HEADER, ""))
    except ValueError:
        return None
    return value if value > 0 else None


class _Answer:
    """The app's response body; the server calls `close` once it has written it all."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self.body, self.done = body, done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        self.done()


def logged_app(app: Callable[..., Any], log: ScrapeLog) -> Callable[..., Any]:
    """`app`, with every request it answers noted in `log`."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> _Answer:
        began = environ.get(ACCEPTED_KEY) or time.perf_counter_ns()
        timeout_s = _stated_timeout(environ)
        body = app(environ, start_response)
        return _Answer(body, lambda: log.note(began, time.perf_counter_ns(), timeout_s))

    return serve


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per request; notes when each connection was accepted (before its thread
    starts: on a busy host that start is part of what the scraper waits for)."""

    daemon_threads = True  # a stuck scraper never holds the process at exit

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.accepted: dict[int, int] = {}  # id(request socket): perf_counter_ns
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.accepted[id(request)] = time.perf_counter_ns()
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Every connection ends here, answered or not (a bare connect, a malformed
        request): its note goes with it, so a worker serving for its life keeps none."""
        self.accepted.pop(id(request), None)
        super().shutdown_request(request)


class _QuietHandler(WSGIRequestHandler):
    server: _Server

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ[ACCEPTED_KEY] = self.server.accepted.get(id(self.request))
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        """A scrape is not worth a line on the terminal."""


def serve(
    registry: CollectorRegistry, host: str, port: int, log: ScrapeLog
) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` on `host:port` (IPv4 or IPv6, by the address) in a daemon thread.
    Raises OSError when it cannot bind."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    httpd: WSGIServer = make_server(
        str(sockaddr[0]),
        port,
        logged_app(make_wsgi_app(registry), log),
        server_class,
        _QuietHandler,
    )
    thread = threading.Thread(target=httpd.serve_forever, name="peakload-metrics", daemon=True)
    thread.start()
    return httpd, thread
