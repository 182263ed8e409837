"""`make check`'s dependency audit (deploy/local/audit.sh): skipped with a line saying nothing
was audited when the vulnerability service is unreachable (a failure under AUDIT_REQUIRED=1),
and otherwise exactly as good as pip-audit's own exit code. pip-audit is stood in for by a
script here: the real one asks PyPI about every installed package."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local" / "audit.sh"


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def reachable() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/pypi/pip/json"
    server.shutdown()
    server.server_close()


def _fake_audit(tmp_path: Path, rc: int) -> Path:
    exe = tmp_path / "pip-audit"
    exe.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nexit {rc}\n')
    exe.chmod(0o755)
    return exe


def _audit(exe: Path, probe: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(exe), sys.executable],
        env={"PATH": "/usr/bin:/bin", "AUDIT_PROBE_URL": probe, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_network_is_a_skip_that_says_nothing_was_audited(tmp_path: Path) -> None:
    exe = _fake_audit(tmp_path, 0)
    closed = f"http://127.0.0.1:{free_port()}/pypi/pip/json"
    out = _audit(exe, closed)
    assert out.returncode == 0
    assert "audit: SKIPPED, nothing was audited" in out.stdout and "passed" not in out.stdout
    assert not (tmp_path / "args").exists()
    required = _audit(exe, closed, AUDIT_REQUIRED="1")
    assert required.returncode == 1 and "FAILED" in required.stderr


def test_with_network_pip_audit_decides(tmp_path: Path, reachable: str) -> None:
    ok = _audit(_fake_audit(tmp_path, 0), reachable)
    assert ok.returncode == 0 and "audit: passed" in ok.stdout
    assert (tmp_path / "args").read_text().split() == [
        "--local", "--skip-editable", "--progress-spinner", "off",
    ]  # fmt: skip
    bad = _audit(_fake_audit(tmp_path, 1), reachable)
    assert bad.returncode == 1 and "audit: FAILED" in bad.stderr and "passed" not in bad.stdout


def test_make_check_runs_the_audit() -> None:
    make = (ROOT / "Makefile").read_text()
    check = make.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "deploy/local/audit.sh $(BIN)/pip-audit" in check
