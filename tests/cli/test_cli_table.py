"""Every command in the lazy table imports and answers --help (a typo there would only show
when a user typed that command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ui.cli import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_loads_and_helps(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_top_level_help_lists_every_command_without_importing_them() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output


HEAVY = ("pandas", "scipy")


def modules_loaded(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, set[str]]:
    """Run `python -m ui ARGS` in a fresh interpreter; its exit code and the top-level
    packages it imported (from -X importtime, which names every module as it loads)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ui", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return proc.returncode, names


@pytest.mark.parametrize(
    "args",
    [["run", "--help"], ["submit", "--help"], ["run", "spec.toml"], ["run", "missing.toml"]],
    ids=["run-help", "submit-help", "run-bad-spec", "run-missing-spec"],
)
def test_a_run_refused_before_it_starts_never_loads_the_analysis_stack(
    args: list[str], tmp_path: Path
) -> None:
    """pandas and scipy cost about a CPU-second to import; they are for a run's summary, so
    `--help` and a spec refused by validation answer without them (ui/estimate.py, the
    summary's import inside ui.commands.run.execute)."""
    (tmp_path / "spec.toml").write_text('name = "x"\n[load]\nconcurrency = [0]\n')
    code, names = modules_loaded(*args, cwd=tmp_path)
    assert code == (0 if "--help" in args else 2)
    assert "loadgen" in names  # the probe sees the project's own imports at all
    assert not set(HEAVY) & names, sorted(set(HEAVY) & names)


def test_a_report_on_a_store_it_cannot_reach_never_loads_the_analysis_stack(
    tmp_path: Path,
) -> None:
    """`report RUN` resolves RUN (analysis.store.refs, ui/commands/store_refs.py) before it
    loads the analysis: a store that refuses, or a reference that matches nothing, answers
    without pandas or scipy."""
    refused = {"PEAKLOAD_DATABASE_URL": "postgresql://peakload@127.0.0.1:1/none"}
    code, names = modules_loaded("report", "nope", cwd=tmp_path, env=refused)
    assert code == 2
    assert "analysis" in names
    assert not set(HEAVY) & names, sorted(set(HEAVY) & names)
