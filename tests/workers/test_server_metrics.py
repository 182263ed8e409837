"""MetricsRecorder stores every scrape of a run, not only those before its first flush."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest

from workers import server_metrics

pytestmark = pytest.mark.integration


class _Exposition(BaseHTTPRequestHandler):
    """One gauge whose value is the number of scrapes served so far."""

    served = 0

    def do_GET(self) -> None:
        type(self).served += 1
        body = f"# TYPE scrapes gauge\nscrapes {type(self).served}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def exposition() -> Iterator[tuple[str, type[_Exposition]]]:
    handler = type("H", (_Exposition,), {"served": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", handler
    srv.shutdown()
    srv.server_close()


@pytest.mark.serial  # counts scrapes on a fixed interval of a timed run: the cores alone
def test_every_scrape_is_stored_across_flushes(
    store_url: str, exposition: tuple[str, type[_Exposition]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = exposition
    monkeypatch.setattr(server_metrics, "SCRAPE_INTERVAL_S", 0.02)
    monkeypatch.setattr(server_metrics, "FLUSH_EVERY_S", 0.1)
    run_id = str(uuid.uuid4())

    async def record() -> server_metrics.MetricsRecorder:
        rec = server_metrics.MetricsRecorder(
            store_url, run_id, url, (time.time_ns(), time.perf_counter_ns())
        )
        rec.start()
        await asyncio.sleep(0.6)  # several flushes
        await rec.stop()
        return rec

    rec = asyncio.run(record())
    with psycopg.connect(store_url) as conn:
        values = [
            int(r[0])
            for r in conn.execute(
                "SELECT value FROM server_metrics WHERE run_id = %s AND name = 'scrapes' "
                "ORDER BY value",
                (run_id,),
            ).fetchall()
        ]
    assert rec.failed == 0
    assert len(values) > 10, values
    # scrapes 1..n in order, none lost: the last stored is the last one served
    assert values == list(range(1, len(values) + 1))
    assert values[-1] >= handler.served - 1  # at most the one in flight at stop
    assert rec.stored == len(values)
