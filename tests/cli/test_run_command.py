"""`peakload run` as a user types it: a subprocess against the simulated engine, stored in a
real database (plain PostgreSQL and TimescaleDB); bad input gets one clear message, a non-zero
exit and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.cli import ROOT, run_peakload
from tests.support.ports import free_port
from tests.support.sim import SimProcess
from tests.support.stores import ledger_check

pytestmark = [pytest.mark.integration, pytest.mark.one_store]  # tests/support/stores.py


def peakload(
    args: list[str], db_url: str, tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """`peakload ARGS` in a process of its own (forked with its imports done:
    tests/support/cli.py), on the store `db_url`, with a home of its own under `tmp_path`."""
    full_env = {
        **os.environ,
        "PEAKLOAD_DATABASE_URL": db_url,
        "PEAKLOAD_HOME": str(tmp_path / "home"),
        **env,
    }
    return run_peakload(args, env=full_env, cwd=ROOT, timeout=180)


# validity bounds set far off: a verdict that must not depend on this machine's load
LOOSE_VALIDITY = (
    "[validity]\nmax_loop_lag_p99_ms = 1e6\nmax_dispatch_delay_p99_ms = 1e6\n"
    "max_cpu_percent = 1e6\nmax_load_shortfall = 0.99\n"
)


def spec_text(base_url: str, **extra: str) -> str:
    target_extra = "".join(f"{k} = {v}\n" for k, v in extra.items())
    return f"""
name = "cli-smoke"
[target]
api = "openai-chat"
base_url = "{base_url}"
model = "m"
{target_extra}
[workload]
prompt_tokens = 16
output_tokens = 8
[load]
concurrency = [1, 4]
duration_s = 1.5
warmup_s = 0.3
"""


def count_runs(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM runs").fetchone()
        return int(row[0]) if row else 0


def test_run_stores_every_record_and_prints_the_summary(
    sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "smoke.toml"
    spec.write_text(spec_text(sim.base_url) + LOOSE_VALIDITY)
    out = tmp_path / "summary.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    # a clean run of ~50 requests cannot prove the 1% error budget yet (3); the validity bounds
    # are set far off, so the self-check does not depend on this machine's load
    assert proc.returncode == 3, proc.stderr
    summary = json.loads(out.read_text())
    assert set(summary) >= {"run_id", "valid", "invalid_reasons", "levels"}
    assert [lv["level"] for lv in summary["levels"]] == [0, 1]
    for lv in summary["levels"]:
        assert set(lv) >= {
            "level",
            "requests_ok",
            "requests_failed",
            "request_rate",
            "output_tokens_per_s",
            "ttft_ms",
            "tpot_ms",
            "itl_ms",
            "e2e_ms",
        }
        assert set(lv["ttft_ms"]) == {"p50", "p90", "p99"}
        assert lv["requests_ok"] > 0 and lv["requests_failed"] == 0
        # the fixed preset answers 50 ms after it has read the request; on loopback it can have
        # read it a few µs before the client's write() call returned and the send was stamped
        assert 49.9 <= lv["ttft_ms"]["p50"] < 1000
    assert "TTFT" in proc.stdout and summary["run_id"] in proc.stdout
    with psycopg.connect(store_url) as conn:
        run = conn.execute(
            "SELECT status, valid, requests_scheduled FROM runs WHERE run_id = %s",
            (summary["run_id"],),
        ).fetchone()
        assert run is not None and run[0] == "completed" and run[1] is summary["valid"]
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT request_id FROM requests WHERE run_id = %s", (summary["run_id"],)
            ).fetchall()
        ]
        assert ledger_check(conn, summary["run_id"], ids) == run[2]
        total = sum(lv["requests_ok"] + lv["requests_failed"] for lv in summary["levels"])
        assert total == run[2]
        ticks = conn.execute(
            "SELECT count(*) FROM ticks WHERE run_id = %s", (summary["run_id"],)
        ).fetchone()
        assert ticks is not None and ticks[0] >= 3
        spec_row = conn.execute(
            "SELECT spec::text FROM runs WHERE run_id = %s", (summary["run_id"],)
        ).fetchone()
        assert spec_row is not None and "cli-smoke" in spec_row[0]


def test_run_scrapes_the_servers_metrics(sim: SimProcess, store_url: str, tmp_path: Path) -> None:
    metrics = sim.base_url.removesuffix("/v1") + "/metrics"
    spec = tmp_path / "m.toml"
    spec.write_text(spec_text(sim.base_url, metrics_url=f'"{metrics}"') + LOOSE_VALIDITY)
    out = tmp_path / "s.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    assert proc.returncode == 3, proc.stderr
    run_id = json.loads(out.read_text())["run_id"]
    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT name, count(*), max(value) FROM server_metrics WHERE run_id = %s GROUP BY name",
            (run_id,),
        ).fetchall()
    names = {r[0]: (r[1], r[2]) for r in rows}
    assert names, "no server metrics stored"
    assert all(n.startswith("peakload_sim") for n in names)
    assert max(c for c, _ in names.values()) >= 2  # scraped more than once during the run


class _Canned(BaseHTTPRequestHandler):
    """A real HTTP server answering every POST with one canned response."""

    status = 200
    content_type = "application/json"
    body = b"{}"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(self.status)
        self.send_header("content-type", self.content_type)
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def canned() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(status: int, content_type: str, body: bytes) -> str:
        handler = type(
            "H", (_Canned,), {"status": status, "content_type": content_type, "body": body}
        )
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


NON_STREAMING = json.dumps(
    {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
).encode()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unreachable", "refused"),
        ("wrong_key", "401"),
        ("html", "HTML"),
        ("non_streaming", "stream"),
        ("missing_key_env", "PEAKLOAD_TEST_NO_SUCH_KEY"),
    ],
)
def test_bad_targets_fail_before_anything_is_written(
    case: str, expected: str, store_url: str, tmp_path: Path, canned: Any
) -> None:
    extra: dict[str, str] = {}
    if case == "unreachable":
        url = f"http://127.0.0.1:{free_port()}/v1"
    elif case == "wrong_key":
        url = canned(401, "application/json", b'{"error": {"message": "invalid api key"}}')
        extra = {"api_key_env": '"PEAKLOAD_TEST_KEY"'}
    elif case == "html":
        url = canned(200, "text/html", b"<html><body>Login required</body></html>")
    elif case == "non_streaming":
        url = canned(200, "application/json", NON_STREAMING)
    else:
        url = canned(200, "text/html", b"")
        extra = {"api_key_env": '"PEAKLOAD_TEST_NO_SUCH_KEY"'}
    spec = tmp_path / "bad.toml"
    spec.write_text(spec_text(url, **extra))
    before = count_runs(store_url)
    proc = peakload(
        ["run", str(spec)], store_url, tmp_path, PEAKLOAD_TEST_KEY="sk-canary-0123456789"
    )
    assert proc.returncode == 2
    message = proc.stderr.strip()
    assert expected.lower() in message.lower(), message
    assert "Traceback" not in message and len(message.splitlines()) <= 3
    assert "sk-canary" not in proc.stderr + proc.stdout
    assert count_runs(store_url) == before


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("duration_s = 1.5", "duration_s = 0"), "load.duration_s"),
        (("concurrency = [1, 4]", "rate = [-5.0]"), "load.rate"),
        (('model = "m"', 'model = "m"\ncolour = "red"'), "target.colour: unknown field"),
        (("[load]", "[load\n"), "not valid TOML"),
    ],
)
def test_bad_specs_fail_with_one_message(
    edit: tuple[str, str], expected: str, sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(spec_text(sim.base_url).replace(*edit))
    before = count_runs(store_url)
    proc = peakload(["run", str(spec)], store_url, tmp_path)
    assert proc.returncode == 2
    assert expected in proc.stderr and str(spec) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert count_runs(store_url) == before
