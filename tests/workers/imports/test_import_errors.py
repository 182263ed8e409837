"""A file that is not the tool's output: one error line naming the file and the field, exit 2
(the README's table), and nothing in the store, even when the failure comes half-way through
writing (one transaction)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.results.storeformat import DATABASE_ENV
from tests.workers.imports.conftest import FIXTURES, Invoke, count_runs
from ui.cli import cli

pytestmark = pytest.mark.integration


def _vllm(tmp_path: Path, edit: dict[str, object]) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-serve.json").read_text())
    doc.update(edit)
    out = tmp_path / "bad.json"
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


@pytest.mark.parametrize(
    ("tool", "make", "expect"),
    [
        (
            "vllm",
            lambda p: _vllm(p, {"ttfts": [0.1]}),
            "bad.json: itls: 40 entries where ttfts has 1",
        ),
        ("vllm", lambda p: _vllm(p, {"itls": "x"}), "bad.json: itls: expected a list"),
        ("vllm", lambda p: _vllm(p, {"ttfts": ["a"] * 40}), "bad.json: ttfts[0]: not a finite"),
        ("guidellm", lambda p: _vllm(p, {}), "bad.json: benchmarks: missing"),
        ("aiperf", lambda p: p, "profile_export*.jsonl: missing"),
        ("inference-perf", lambda p: _vllm(p, {}), "bad.json: top level: expected a list"),
    ],
)
def test_bad_file_one_line_exit_2_nothing_written(
    peakload: Invoke, import_url: str, tmp_path: Path, tool: str, make: object, expect: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    result = peakload("import", tool, str(path))
    assert result.exit_code == 2, result.output
    assert expect in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert count_runs(import_url) == (0, 0)


def test_not_json_names_the_line(peakload: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"ttfts": [1,\n', encoding="utf-8")
    result = peakload("import", "vllm", str(path))
    assert result.exit_code == 2 and "x.json: line 2: not JSON" in result.output


def test_failure_half_way_leaves_nothing(peakload: Invoke, import_url: str, tmp_path: Path) -> None:
    """A time no int4 µs offset holds (a request's chunks 40 minutes after its send) fails
    encoding the COPY payload, after the run, level and shard rows were written in the same
    transaction."""
    doc = json.loads((FIXTURES / "vllm-bench-serve.json").read_text())
    doc["itls"][-1] = [2400.0]
    path = tmp_path / "late.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = peakload("import", "vllm", str(path))
    assert result.exit_code == 2, result.output
    assert "cannot be stored" in result.output
    assert count_runs(import_url) == (0, 0)


def test_unknown_tool_and_missing_path(peakload: Invoke, tmp_path: Path) -> None:
    assert peakload("import", "locust", str(tmp_path)).exit_code == 2
    missing = peakload("import", "vllm", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2 and "nope.json: no such file or folder" in missing.output


def test_one_transaction_on_both_stores(
    store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On the embedded PostgreSQL and on TimescaleDB (hypertables, request_blocks): a good file
    is stored whole, a file failing half-way leaves only what was there."""
    monkeypatch.setenv(DATABASE_ENV, store_url)
    good = CliRunner().invoke(cli, ["import", "vllm", str(FIXTURES / "vllm-bench-serve.json")])
    assert good.exit_code == 0, good.output
    assert count_runs(store_url) == (1, 40)
    doc = json.loads((FIXTURES / "vllm-bench-serve.json").read_text())
    doc["itls"][-1] = [2400.0]
    late = tmp_path / "late.json"
    late.write_text(json.dumps(doc), encoding="utf-8")
    bad = CliRunner().invoke(cli, ["import", "vllm", str(late)])
    assert bad.exit_code == 2, bad.output
    assert count_runs(store_url) == (1, 40)
