"""People fixtures: stored runs with different launchers, presets, models, labels and start
dates (rows made by the store's own functions, workers/store/runs.py; no requests: the Runs
page's filters and the Run page's notes do not need any), and users of each role."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from loadgen.runspec.spec import spec_from_dict
from tests.support.stores import FreshDatabase
from workers.store import runs as store_runs
from workers.store import users

PASSWORDS = {"vera": "viewer-pw-3141", "rune": "runner-pw-2718", "ada": "admin-pw-1618"}
ROLES = {"vera": "viewer", "rune": "runner", "ada": "admin"}

# name -> (launched_by, preset, model, engine label, started_at or None for now)
RUNS: dict[str, tuple[str | None, str | None, str, str, str | None]] = {
    "pp-llama-old": ("rune", "llamacpp", "smollm2", "llama.cpp", "2025-01-15 10:00:00+00"),
    "pp-llama-new": ("rune", "llamacpp", "smollm2", "llama.cpp", None),
    "pp-vllm": ("ada", "vllm", "qwen3-8b", "vllm", None),
    "pp-plain": (None, None, "qwen3-8b", "sglang", None),
}


def _spec(name: str, preset: str | None, model: str, engine: str) -> Any:
    target: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", "model": model}
    target.update({"preset": preset} if preset else {"api": "openai-chat"})
    return spec_from_dict(
        {
            "name": name,
            "target": target,
            "workload": {"prompt_tokens": 8, "output_tokens": 8},
            "load": {"concurrency": [1], "duration_s": 1},
            "labels": {"model": model, "engine": engine},
        }
    )


def make_people_runs(url: str) -> dict[str, str]:
    """The runs of RUNS, completed (no requests); returns name -> run_id."""
    import uuid

    out: dict[str, str] = {}
    with psycopg.connect(url) as conn:
        for name, (by, preset, model, engine, started) in RUNS.items():
            run_id = str(uuid.uuid4())
            spec = _spec(name, preset, model, engine)
            store_runs.create_run(conn, run_id, spec, mode="local", launched_by=by)
            store_runs.start_run(conn, run_id)
            store_runs.finish_run(conn, run_id, "completed", True, [], 0)
            if started is not None:
                conn.execute(
                    "UPDATE runs SET created_at = %s::timestamptz, started_at = %s::timestamptz,"
                    " ended_at = %s::timestamptz + interval '1 second' WHERE run_id = %s",
                    (started, started, started, run_id),
                )
                conn.commit()
            out[name] = run_id
    return out


def add_people(url: str) -> None:
    """vera (viewer), rune (runner), ada (admin) with the passwords of PASSWORDS."""
    with psycopg.connect(url) as conn:
        for name, role in ROLES.items():
            users.add_user(conn, name, role, PASSWORDS[name])


@dataclass(frozen=True)
class PeopleStore:
    url: str
    ids: dict[str, str]  # run name -> run_id
    cache_dir: str  # analysis.store.cache's directory for it (PEAKLOAD_ANALYSIS_CACHE)


@pytest.fixture(scope="session")
def people_store(plain_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeopleStore]:
    """A store of its own (users make every visitor log in) with the three users and the four
    runs above."""
    db = FreshDatabase(plain_url)
    try:
        ids = make_people_runs(db.url)
        add_people(db.url)
        yield PeopleStore(db.url, ids, str(tmp_path_factory.mktemp("people-cache")))
    finally:
        db.drop()
