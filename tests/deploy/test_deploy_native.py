"""The compose file's peakload processes started natively, from the very commands and variables
the file gives them (only the addresses of Redis, the store and the UI's port are this machine's):
the migration ends, every region worker and the control worker answer a Celery ping, the beat
keeps running, the UI serves its health page."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.test_deploy_files import _compose_peakload_services, _env_list
from tests.support.celery_workers import REPO, RedisServer, stop_process
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_S = 90.0


def _native_env(svc: dict[str, Any], ours: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_")}
    for key, value in _env_list(svc.get("environment")).items():
        env[key] = ours.get(key, value)
    if svc.get("env_file"):  # keys.env, as an operator fills it from the example
        example = REPO / "deploy" / "compose" / "keys.env.example"
        for line in example.read_text().splitlines():
            if line and not line.startswith("#"):
                env[line.split("=", 1)[0]] = "sk-native-test"
    env["PYTHONPATH"] = str(REPO)
    return env


def test_compose_processes_start_natively(
    redis_server: RedisServer, dist_store_url: str, tmp_path: Path
) -> None:
    services = _compose_peakload_services()
    ui_port = free_port()
    ours = {
        "PEAKLOAD_REDIS_URL": redis_server.url(0),  # the test's Redis has no password
        "PEAKLOAD_DATABASE_URL": dist_store_url,
        "PEAKLOAD_UI_PASSWORD": "native-test-password",
    }
    migrate = services["migrate"]
    done = subprocess.run(
        [sys.executable, "-m", "ui", *migrate["command"]],
        env=_native_env(migrate, ours),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = []
    try:
        for name, svc in services.items():
            cmd = [str(a) for a in svc.get("command") or []]
            if name in ("migrate", "cli") or not cmd:
                continue
            if name == "ui":  # this machine's port, and loopback only
                cmd = [*cmd[: cmd.index("--host")], "--host", "127.0.0.1", "--port", str(ui_port)]
            log = (tmp_path / f"{name}.log").open("wb")
            logs.append(log)
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "ui", *cmd],
                env=_native_env(svc, ours),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        commands = [s.get("command") or [] for s in services.values()]
        regions = {c[2] for c in commands if c[:2] == ["worker", "--region"]}
        assert len(regions) == 3 and {"beat", "control", "ui"} <= set(procs)

        from workers.app import make_app

        app = make_app(redis_server.url(0))
        deadline = time.monotonic() + START_S
        answered: set[str] = set()
        while time.monotonic() < deadline:
            for name, p in procs.items():
                assert p.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()}"
            answered = {
                node.split(".", 1)[0] for reply in app.control.ping(timeout=1.0) for node in reply
            }
            if answered >= regions | {"control"}:
                break
            time.sleep(0.5)
        assert answered >= regions | {"control"}, answered

        health = ""
        while time.monotonic() < deadline and health != "ok":
            try:
                health = httpx.get(f"http://127.0.0.1:{ui_port}/_stcore/health", timeout=2).text
            except httpx.TransportError:
                time.sleep(0.3)
        assert health == "ok", (tmp_path / "ui.log").read_text()
        assert procs["beat"].poll() is None
    finally:
        for p in procs.values():
            stop_process(p, 20)
        for log in logs:
            log.close()
