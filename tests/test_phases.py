"""make test's two-phase runner (tests/phases.py): one strict exit code for both phases, the
marker expressions each phase runs, and the slowest tests read back from both JUnit reports."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.phases import (
    MARKERS,
    NO_TESTS_RAN,
    WORKERS_PER_CORE,
    default_workers,
    hungriest,
    main,
    narrowed_to_marked_modules,
    phase_command,
    run_exit_code,
    run_side_by_side,
    slowest,
)


def test_a_phase_that_selects_nothing_is_not_a_failure_but_a_run_that_ran_nothing_is() -> None:
    assert run_exit_code([0, 0]) == 0
    assert run_exit_code([0, NO_TESTS_RAN]) == 0
    assert run_exit_code([NO_TESTS_RAN, 0]) == 0
    assert run_exit_code([NO_TESTS_RAN, NO_TESTS_RAN]) == NO_TESTS_RAN
    assert run_exit_code([1, 0]) == 1
    assert run_exit_code([0, 2]) == 2
    assert run_exit_code([NO_TESTS_RAN, 1]) == 1
    assert run_exit_code([4, 1]) == 4


def test_the_parallel_phase_has_workers_and_the_serial_ones_run_without(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    par = phase_command(3, "not slow", "parallel", junit, ["-x"])
    assert par[:3] == [sys.executable, "-m", "pytest"]
    assert par[par.index("-m", 3) + 1] == "(not slow) and (not serial and not alone)"
    assert par[par.index("-n") + 1] == "3" and par[par.index("--dist") + 1] == "worksteal"
    assert par[-2:] == [f"--junitxml={junit}", "-x"]
    ser = phase_command(3, None, "serial", junit, [])
    assert ser[ser.index("-m", 3) + 1] == "serial and not alone"
    assert "-n" not in ser
    two = phase_command(3, None, "serial", junit, [], serial_workers=2)
    assert two[two.index("-n") + 1] == "2" and two[two.index("--dist") + 1] == "loadfile"
    assert "-n" not in phase_command(3, None, "alone", junit, [], serial_workers=2)
    alone = phase_command(3, "not slow", "alone", junit, [])
    assert alone[alone.index("-m", 3) + 1] == "(not slow) and (alone)"
    assert "-n" not in alone


def test_the_parallel_phase_has_workers_per_usable_core_and_refuses_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 5}, raising=False)
    assert default_workers() == 2 * WORKERS_PER_CORE
    with pytest.raises(SystemExit) as exited:
        main(["--workers", "0"])
    assert exited.value.code == 2
    assert "--workers must be at least 1 (got 0)" in capsys.readouterr().err


def test_every_test_is_in_exactly_one_phase(pytester: pytest.Pytester) -> None:
    """The three marker expressions split a suite without overlap or gap."""
    pytester.makeini("[pytest]\nmarkers =\n    serial: s\n    alone: a\n")
    pytester.makepyfile(
        """
        import pytest

        def test_plain(): pass

        @pytest.mark.serial
        def test_serial(): pass

        @pytest.mark.serial
        @pytest.mark.alone
        def test_serial_alone(): pass

        @pytest.mark.alone
        def test_alone(): pass
        """
    )
    chosen = {}
    for phase, expr in MARKERS.items():
        result = pytester.runpytest("-m", expr, "--collect-only", "-q", "-p", "no:cacheprovider")
        chosen[phase] = {line.split("::")[-1] for line in result.outlines if "::" in line}
    assert chosen == {
        "parallel": {"test_plain"},
        "serial": {"test_serial"},
        "alone": {"test_serial_alone", "test_alone"},
    }


def test_the_later_phases_collect_only_the_modules_that_name_their_marker(tmp_path: Path) -> None:
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    for name, text in {
        "tests/test_plain.py": "def test_a(): pass\n",
        "tests/test_serial.py": "import pytest\npytestmark = pytest.mark.serial\n",
        "tests/sub/test_both.py": "@pytest.mark.serial\n@pytest.mark.alone\ndef test_b(): pass\n",
        "tests/sub/test_aloneness.py": "def test_aloneness(): pass\n",  # a word, not the marker
        "tests/sub/helper_alone.py": "ALONE = 1\n",  # not a test module
    }.items():
        (tmp_path / name).write_text(text)
    assert narrowed_to_marked_modules("parallel", ["-x"], tmp_path) == ["-x"]
    assert narrowed_to_marked_modules("serial", ["-x"], tmp_path) == [
        "-x",
        "tests/sub/test_both.py",
        "tests/test_serial.py",
    ]
    assert narrowed_to_marked_modules("alone", [], tmp_path) == ["tests/sub/test_both.py"]
    # the paths given narrow it, an option's value is not a path, a single test is kept as is
    assert narrowed_to_marked_modules("serial", ["tests/sub", "-k", "both"], tmp_path) == [
        "-k",
        "both",
        "tests/sub/test_both.py",
    ]
    assert narrowed_to_marked_modules("alone", ["tests/test_serial.py"], tmp_path) is None
    single = ["tests/test_plain.py::test_a"]
    assert narrowed_to_marked_modules("alone", single, tmp_path) == single


def test_the_slowest_tests_come_from_both_reports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    a.write_text(
        '<testsuites><testsuite><testcase classname="t.a" name="fast" time="0.5"/>'
        '<testcase classname="t.a" name="slow" time="40.0"/></testsuite></testsuites>'
    )
    b.write_text(
        '<testsuites><testsuite><testcase classname="t.b" name="mid" time="7"/>'
        "</testsuite></testsuites>"
    )
    assert slowest([a, b, tmp_path / "missing.xml"], 2) == [(40.0, "t.a::slow"), (7.0, "t.b::mid")]


def test_the_hungriest_tests_come_from_their_cpu_property(tmp_path: Path) -> None:
    a = tmp_path / "a.xml"
    a.write_text(
        '<testsuites><testsuite><testcase classname="t.a" name="idle" time="30">'
        '<properties><property name="cpu_s" value="0.10"/></properties></testcase>'
        '<testcase classname="t.a" name="busy" time="3">'
        '<properties><property name="cpu_s" value="5.50"/></properties></testcase>'
        '<testcase classname="t.a" name="unmeasured" time="1"/></testsuite></testsuites>'
    )
    assert hungriest([a, tmp_path / "missing.xml"], 1) == [(5.5, "t.a::busy")]
    assert [t for _, t in hungriest([a])] == ["t.a::busy", "t.a::idle"]


def test_each_test_records_the_cpu_it_used_in_its_junit_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin itself, in a pytest run of its own: a test that spins for 0.3 s of CPU
    reports at least that, one that sleeps reports far less."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    pytester.makeconftest('pytest_plugins = ["tests.support.cputime"]')
    pytester.makepyfile(
        """
        import time

        def test_spins():
            end = time.process_time() + 0.3
            while time.process_time() < end:
                pass

        def test_sleeps():
            time.sleep(0.3)
        """
    )
    junit = pytester.path / "j.xml"
    pytester.runpytest_subprocess(f"--junitxml={junit}", "-p", "no:cacheprovider").assert_outcomes(
        passed=2
    )
    used = {t.split("::")[-1]: s for s, t in hungriest([junit])}
    assert used["test_spins"] >= 0.3 - 0.02
    assert used["test_sleeps"] < 0.2


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_side_by_side_the_parallel_phase_runs_at_idle_priority_and_its_output_comes_after(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Both phases start together; the parallel one (and what it starts) under SCHED_IDLE, its
    output held in the log and printed once both have ended; each phase's own exit code."""
    policy = "import os, sys; print('policy', os.sched_getscheduler(0)); sys.exit({})"
    grandchild = [sys.executable, "-c", policy.format(3)]  # what the phase starts inherits it
    child = f"import subprocess, sys; sys.exit(subprocess.call({grandchild!r}))"
    parallel = [sys.executable, "-c", child]
    serial = [sys.executable, "-c", "import os; print('serial', os.sched_getscheduler(0))"]
    codes, walls = run_side_by_side([parallel, serial], 4, tmp_path / "parallel.log")
    assert codes == [3, 0]
    assert all(w >= 0 for w in walls)
    out = capfd.readouterr().out
    assert f"policy {os.SCHED_IDLE}" in out
    assert f"serial {os.sched_getscheduler(0)}" in out
    assert out.index("serial ") < out.index("its output ===") < out.index("policy ")
    assert (tmp_path / "parallel.log").read_text().strip() == f"policy {os.SCHED_IDLE}"
