"""`make check`'s dependency audit (deploy/local/audit.sh): skipped with a line saying nothing
was audited when the vulnerability service is unreachable (a failure under AUDIT_REQUIRED=1),
and otherwise exactly as good as pip-audit's own exit code. pip-audit is stood in for by a
script here: the real one asks PyPI about every installed package."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


OK = {"name": "click", "version": "8.1.7", "vulns": []}
SKIPPED = {"name": "celery", "skip_reason": "Dependency not found on PyPI and could not be audited"}
VULN = {"name": "jinja2", "version": "3.1.2", "vulns": [{"id": "GHSA-h5c8-rqwp-cp95"}]}


def _fake_audit(tmp_path: Path, rc: int, deps: list[dict[str, Any]] | None = None) -> Path:
    """A pip-audit that records its arguments and writes `deps` as its JSON report (`-o`)."""
    report = json.dumps({"dependencies": [OK] if deps is None else deps, "fixes": []})
    exe = tmp_path / "pip-audit"
    exe.write_text(
        f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n'
        f'while [ "$1" != "-o" ]; do shift; done\necho \'{report}\' > "$2"\nexit {rc}\n'
    )
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
    assert ok.returncode == 0, ok.stderr
    assert "audit: 1 packages checked, 0 not checked" in ok.stdout
    assert "audit: passed: no known vulnerability in 1 packages" in ok.stdout
    assert (tmp_path / "args").read_text().split()[:6] == [
        "--local", "--skip-editable", "--progress-spinner", "off", "--format", "json",
    ]  # fmt: skip
    bad = _audit(_fake_audit(tmp_path, 1), reachable)
    assert bad.returncode == 1 and "audit: FAILED" in bad.stderr and "passed" not in bad.stdout
    vuln = _audit(_fake_audit(tmp_path, 1, [OK, VULN]), reachable)
    assert vuln.returncode == 1 and "GHSA-h5c8-rqwp-cp95" in vuln.stderr


def test_packages_that_could_not_be_looked_up_are_never_a_pass(
    tmp_path: Path, reachable: str
) -> None:
    """What `make check` met here: an index that answers the probe but no per-version query,
    so pip-audit skipped every package and still said "No known vulnerabilities found"."""
    none = _audit(_fake_audit(tmp_path, 0, [SKIPPED, SKIPPED]), reachable)
    assert none.returncode == 0, none.stderr
    assert "audit: 0 packages checked, 2 not checked" in none.stdout
    assert "audit: SKIPPED, nothing was audited" in none.stdout and "passed" not in none.stdout
    some = _audit(_fake_audit(tmp_path, 0, [OK, SKIPPED]), reachable)
    assert some.returncode == 0 and "audit: PARTIAL" in some.stdout and "passed" not in some.stdout
    assert "not checked: celery" in some.stdout
    required = _audit(_fake_audit(tmp_path, 0, [OK, SKIPPED]), reachable, AUDIT_REQUIRED="1")
    assert required.returncode == 1 and "could not be looked up" in required.stderr


def test_make_check_runs_the_audit() -> None:
    make = (ROOT / "Makefile").read_text()
    check = make.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "deploy/local/audit.sh $(BIN)/pip-audit" in check
