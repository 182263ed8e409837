"""`make test-fast`'s choice of tests (tests/affected.py): on a small project laid out like this
one, and on this one, every way a test reaches a module is followed, and a change outside the
packages selects everything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.affected import affected_tests, changed_files
from tests.phases import main as phases_main

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "loadgen/__init__.py": "",
    "loadgen/base.py": "X = 1\n",
    "loadgen/mid.py": "from loadgen.base import X\n",
    "loadgen/rel.py": "from .base import X\n",
    "loadgen/leaf.py": "Y = 2\n",
    "loadgen/presets/hosted.toml": "name = 'hosted'\n",
    "loadgen/sim/__init__.py": "",
    "loadgen/sim/__main__.py": "import loadgen.leaf\n",
    "ui/__init__.py": "",
    "ui/__main__.py": "from ui.cli import main\n",
    "ui/cli.py": (
        'COMMANDS = {"run": ("ui.commands.run", "run_command"),'
        ' "report": ("ui.commands.report", "report_command")}\n'
    ),
    "ui/commands/report.py": "X = 0\n",
    "ui/commands/__init__.py": "",
    "ui/commands/run.py": "from pathlib import Path\nAPP = Path(__file__).parents[1] / 'app.py'\n",
    "ui/app.py": 'PAGES = ["views/runs.py"]\n',
    "ui/views/runs.py": "import loadgen.rel\n",
    "tests/__init__.py": "",
    "tests/conftest.py": 'pytest_plugins = ["tests.support.sim"]\n',
    "tests/support/__init__.py": "",
    "tests/support/sim.py": (
        'import pytest\nARGS = ["-m", "loadgen.sim"]\n\n\n'
        "@pytest.fixture\ndef sim():\n    return ARGS\n"
    ),
    "tests/unit/__init__.py": "",
    "tests/unit/test_mid.py": "from loadgen import mid\n",
    "tests/unit/test_cli.py": 'CMD = ["python", "-m", "ui", "run"]\n',
    "tests/unit/test_readme.py": 'TABLE = "README.md"\n',
    "tests/unit/test_alone.py": "import json\n",
    "tests/unit/test_sim.py": "def test_it(sim):\n    assert sim\n",
    "tests/unit/test_report_cli.py": 'CMD = ["python", "-m", "ui", "report"]\n',
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def chosen(project: Path, *files: str) -> list[str] | None:
    found = affected_tests(project, files)
    return None if found is None else [Path(p).name for p in found]


def test_a_module_s_importers_and_their_tests_are_chosen(project: Path) -> None:
    # base <- mid <- test_mid; base <- rel (relative import) <- views/runs.py <- app.py (a file
    # named in a string) <- ui/commands/run.py <- ui/cli.py (the lazy table) <- ui/__main__
    # (`-m ui`) <- test_cli, which asks for `run`; test_report_cli runs the CLI too, but asks
    # for `report` only; the sim (-m loadgen.sim) reaches only leaf
    assert chosen(project, "loadgen/base.py") == ["test_cli.py", "test_mid.py"]
    assert chosen(project, "ui/commands/report.py") == ["test_report_cli.py"]
    assert chosen(project, "ui/cli.py") == ["test_cli.py", "test_report_cli.py"]


def test_a_conftest_s_plugin_counts_for_the_tests_that_use_its_fixtures(
    project: Path,
) -> None:
    # leaf <- loadgen/sim/__main__ ("-m", "loadgen.sim" in tests/support/sim.py, a plugin of
    # the conftest) <- test_sim, the one test asking for its fixture `sim`
    assert chosen(project, "loadgen/leaf.py") == ["test_sim.py"]
    everything = [
        "test_alone.py",
        "test_cli.py",
        "test_mid.py",
        "test_readme.py",
        "test_report_cli.py",
        "test_sim.py",
    ]
    assert chosen(project, "tests/conftest.py") == everything
    # a plugin with a hook applies to every test
    (project / "tests/support/sim.py").write_text(
        FILES["tests/support/sim.py"] + "\n\ndef pytest_runtest_setup(item):\n    pass\n"
    )
    assert chosen(project, "loadgen/leaf.py") == everything


def test_any_product_module_selects_the_house_test_which_imports_none(project: Path) -> None:
    (project / "tests" / "test_house.py").write_text("import subprocess\n")  # reads the tree
    assert "test_house.py" in (chosen(project, "loadgen/leaf.py") or [])
    assert "test_house.py" not in (chosen(project, "tests/unit/test_alone.py") or [])


def test_a_test_with_nothing_changed_under_it_is_left_out(project: Path) -> None:
    assert chosen(project, "tests/unit/test_alone.py") == ["test_alone.py"]
    assert chosen(project, "docs/ARCHITECTURE.md") == []


def test_data_files_count_for_their_folder_and_the_tests_that_name_them(project: Path) -> None:
    # a preset's TOML: no module beside it, so the package above (loadgen/__init__) counts
    assert chosen(project, "loadgen/presets/hosted.toml") == [
        "test_cli.py",
        "test_mid.py",
        "test_sim.py",
    ]
    assert chosen(project, "README.md") == ["test_readme.py"]


def test_a_change_outside_the_packages_selects_every_test(project: Path) -> None:
    assert chosen(project, "pyproject.toml") is None
    assert chosen(project, "loadgen/base.py", "deploy/local/llama.sh") is None


def test_a_deleted_module_still_selects_the_tests_that_imported_it(project: Path) -> None:
    (project / "loadgen/base.py").unlink()
    assert chosen(project, "loadgen/base.py") == ["test_cli.py", "test_mid.py"]


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def test_the_change_is_the_working_tree_else_the_last_commit_else_since(project: Path) -> None:
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "one")
    assert changed_files(project) == (None, "the first commit")
    (project / "loadgen/leaf.py").write_text("Y = 3\n")
    git(project, "commit", "-qam", "two")
    assert changed_files(project) == (["loadgen/leaf.py"], "the last commit")
    (project / "loadgen/mid.py").write_text("from loadgen.base import X as Z\n")
    (project / "loadgen/new.py").write_text("")
    assert changed_files(project) == (
        ["loadgen/mid.py", "loadgen/new.py"],
        "uncommitted changes",
    )
    files, basis = changed_files(project, "HEAD~1")
    assert files == ["loadgen/leaf.py", "loadgen/mid.py", "loadgen/new.py"]
    assert basis == "changes since HEAD~1"
    with pytest.raises(ValueError, match="'nope' is not a revision"):
        changed_files(project, "nope")
    assert changed_files(project / "loadgen" / "..", None)[0] is not None
    assert changed_files(project.parent / "no-such-checkout")[0] is None


def test_on_this_project_a_page_and_a_formula_reach_their_tests() -> None:
    page = affected_tests(ROOT, ["ui/views/runs.py"])
    cost = affected_tests(ROOT, ["analysis/reports/cost.py"])
    assert page is not None and "tests/ui/test_browser.py" in page
    assert cost is not None and "tests/analysis/test_cost.py" in cost
    assert "tests/ui/test_browser.py" not in (affected_tests(ROOT, ["tests/test_phases.py"]) or [])
    # a Redis helper of the distributed shards: not every test through the conftest's plugins
    pool = affected_tests(ROOT, ["workers/sample_pool.py"]) or []
    assert "tests/workers/test_sample_pool.py" in pool and "tests/cli/test_run_command.py" in pool
    assert "tests/analysis/test_metrics.py" not in pool
    # a page of the app: its tests, not every test that runs some command of the CLI
    view = affected_tests(ROOT, ["ui/views/run.py"]) or []
    assert "tests/ui/test_pages.py" in view and "tests/cli/test_run_command.py" not in view


def test_an_unknown_base_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert phases_main(["--affected", "--since", "no-such-rev-anywhere"]) == 2
    assert "'no-such-rev-anywhere' is not a revision" in capsys.readouterr().err
