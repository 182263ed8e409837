"""Importing a tool's saved output (tests/workers/imports/fixtures, made by the real tools: see
its README) into a fresh embedded store through the `peakload import` command, and reading the
stored run back the way `report` does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from analysis.reports.report import build_report
from loadgen.results.storeformat import DATABASE_ENV
from ui.cli import cli

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def import_url(plain_url: str, fresh_database: Any) -> Iterator[str]:
    """A fresh migrated database on the session's embedded server."""
    yield fresh_database(plain_url).url


Invoke = Callable[..., Result]


@pytest.fixture
def peakload(import_url: str, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """`peakload ARGS...` in process against `import_url`."""
    monkeypatch.setenv(DATABASE_ENV, import_url)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    return invoke


def run_id_of(result: Result) -> str:
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("imported "))
    return line.rsplit(" ", 1)[-1]


def report_of(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return build_report(conn, run_id)


def count_runs(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()
        reqs = conn.execute("SELECT count(*) FROM requests").fetchone()
    assert runs is not None and reqs is not None
    return int(runs[0]), int(reqs[0])
