"""The Celery task module loads a shard's whole code when it is imported: a worker imports it
before forking its pool, so no shard pays for its imports after claiming its lease (64 shards
arriving at once on 2 cores paid ~0.6 CPU-s each, cold)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.celery_workers import REPO

SHARD_CODE = (
    "workers.shard_exec",
    "loadgen.engine.runner",
    "loadgen.targets.factory",
    "loadgen.targets.openai",
    "workers.store.writer",
    "workers.metrics_serve",
    "httpx",
)


def test_importing_the_task_module_loads_what_a_shard_runs() -> None:
    probe = (
        "import json, sys; import workers.tasks; "
        f"print(json.dumps([m for m in {list(SHARD_CODE)!r} if m not in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
