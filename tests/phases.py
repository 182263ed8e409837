"""`make test`'s runner: the suite in three pytest phases, one after the other: every test not
marked `serial` or `alone` under pytest-xdist (`-n N`, 2 per usable core by default, with work
stealing), then the `serial` tests (timing and
accuracy) alone on the machine, then the `alone` ones (tests that fill the cores: a sim at
1,000 streams, the 74-process fleet, llama-server and vLLM). One exit code for all, the 25
slowest tests of the whole run printed at the end, then the 25 that used the most CPU
(tests/support/cputime.py).

`--serial-workers 2` runs two serial modules side by side (`--dist loadfile`). The serial tests
mostly wait on servers and timers (97 CPU-seconds in 372 s one at a time, 13 % of the 2
cores), and two at a time the phase took 202-211 s in three runs, all green, but in the
fourth, a whole run, a region's round trip through its delaying proxy measured 17.6 ms and
the server's share of TTFT 5.9 ms against the sim's 20 (the proxy adds 2 ms; measured while
the other module ran). A measurement's test cannot carry that doubt: one at a time is the
default.

Handing xdist the `slow` tests first (longest-first, against the tail of long tests collected
last) was measured and dropped: the parallel phase took 774 s against 403 s in collection order,
its tests 660 CPU-s against 454 (the long ones, browsers and clusters, ran side by side, and
modules' fixtures were set up again on every worker a module's tests were split over).

`--overlap` (`make test-fast`) runs the first two side by side instead: the serial tests at
normal priority with their output live, the parallel phase under SCHED_IDLE (Linux: it runs only
on CPU time the serial tests leave, and a waking serial test preempts it), its output kept in a
file and printed when both have ended; the `alone` tests after them. The serial tests wait on
servers most of the time, so the whole suite takes about 680 s here instead of 1,100-1,180 s.
It is not the default, because it is not as strict: when a serial test fills both cores the
idle-class tests get no CPU for seconds and their own deadlines pass, and on a PREEMPT_NONE
kernel (this one) an idle-class task inside a system call keeps the CPU until it leaves it, so
a waking serial task may wait that long (5 failures in 5 whole runs here, no test twice; one
of them, a proxy's round trip, later failed with the phases one after the other too).

    python -m tests.phases [--workers N] [--select EXPR] [--affected [--since REV]]
                           [--overlap] [--reports DIR] [pytest args...]

`--select` is a marker expression every phase is narrowed by (`make test-fast`: "not slow").
`--affected` narrows each to the test modules a change can break (tests/affected.py): the
working tree's changes, or the last commit's when it is clean, or every change since `REV`.
When nothing a test reaches has changed, it says so and exits 0 without running pytest.
A phase that selects nothing (pytest's exit 5) is not a failure; the run is one (exit 5) only
when no phase ran a test. Otherwise the exit code is the first failing phase's.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from tests.affected import affected_tests, changed_files
from tests.support.cputime import CPU_PROPERTY

ROOT = Path(__file__).resolve().parents[1]
NO_TESTS_RAN = 5  # pytest.ExitCode.NO_TESTS_COLLECTED
BAD_USAGE = 2
SLOWEST = 25
# xdist workers per core the process may use: most parallel tests wait on servers, timers and
# sleeps, so more workers than cores fill the waits. Measured on 2 cores (fresh clones,
# 2026-12-07): 4 workers 446 s; 4 with work stealing (an idle worker takes queued tests from a
# busy one) 370 s alone; 6 with it 330-362 s, but two of three runs failed a timing test the
# extra load bent (each since moved to the serial phase); 8 saturated the cores (410 s). 2 per
# core: `--workers 6` (TEST_WORKERS=6) is the faster, less strict choice.
WORKERS_PER_CORE = 2


def default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return WORKERS_PER_CORE * max(cores, 1)


DEFAULT_SERIAL_WORKERS = 1


PHASES = ("parallel", "serial", "alone")
MARKERS = {
    "parallel": "not serial and not alone",
    "serial": "serial and not alone",
    "alone": "alone",
}


# the marker a phase after the first needs in a module's text for the module to be collected
# there: collecting every module costs a pytest process 7-8 CPU-seconds, the 24 that can hold
# a `serial` or `alone` test under 2
NAMED_MARKER = {"serial": re.compile(r"\bserial\b"), "alone": re.compile(r"\balone\b")}


def _is_test_path(arg: str, root: Path) -> bool:
    """A positional argument naming a file or folder of the suite (not an option's value)."""
    if arg.startswith("-") or "::" in arg:
        return False
    path = (root / arg).resolve()
    return path.exists() and path.is_relative_to(root / "tests")


def narrowed_to_marked_modules(phase: str, extra: list[str], root: Path = ROOT) -> list[str] | None:
    """`extra` with the suite's paths (its test folder when it names none) replaced by the
    test modules whose text names the phase's marker: a module without the word cannot hold
    a test with the marker (markers are set in the module itself; no conftest adds one).
    `extra` unchanged for the first phase, or when it names single tests (`path::test`); None
    when no module names the marker (the phase has nothing to run)."""
    pattern = NAMED_MARKER.get(phase)
    if pattern is None or any("::" in arg for arg in extra):
        return extra
    roots = [a for a in extra if _is_test_path(a, root)] or ["tests"]
    others = [a for a in extra if a not in roots]
    modules: list[str] = []
    for arg in roots:
        path = root / arg
        candidates = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        modules += [str(c.relative_to(root)) for c in candidates if pattern.search(c.read_text())]
    return [*others, *modules] if modules else None


def phase_command(
    workers: int,
    select: str | None,
    phase: str,
    junit: Path,
    extra: list[str],
    serial_workers: int = 1,
) -> list[str]:
    marker = MARKERS[phase]
    expr = f"({select}) and ({marker})" if select else marker
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", expr]
    if phase == "parallel":  # work stealing: an idle worker takes queued tests from a busy one,
        # so the phase does not end on one worker's backlog of long tests
        cmd += ["-n", str(workers), "--dist", "worksteal"]
    elif phase == "serial" and serial_workers > 1:
        cmd += ["-n", str(serial_workers), "--dist", "loadfile"]
    return [*cmd, f"--junitxml={junit}", *extra]


def run_exit_code(codes: list[int]) -> int:
    """0 when every phase passed or selected nothing (and at least one ran), the first failing
    phase's code otherwise, 5 when no phase ran a test."""
    failing = [c for c in codes if c not in (0, NO_TESTS_RAN)]
    if failing:
        return failing[0]
    return NO_TESTS_RAN if all(c == NO_TESTS_RAN for c in codes) else 0


def _cases(junit_files: list[Path]) -> Iterator[tuple[str, ET.Element]]:
    """Every test case of the JUnit reports that exist, with its `module::test` name."""
    for path in junit_files:
        if path.exists():
            for case in ET.parse(path).iter("testcase"):
                yield f"{case.get('classname', '')}::{case.get('name', '')}", case


def slowest(junit_files: list[Path], n: int = SLOWEST) -> list[tuple[float, str]]:
    """The `n` longest tests (setup, call and teardown) over the phases' JUnit reports."""
    rows = [(float(case.get("time", "0") or 0), name) for name, case in _cases(junit_files)]
    return sorted(rows, reverse=True)[:n]


def hungriest(junit_files: list[Path], n: int = SLOWEST) -> list[tuple[float, str]]:
    """The `n` tests that used the most CPU (their own and their children's), from the
    `cpu_s` property tests/support/cputime.py records in each JUnit test case."""
    rows = [
        (float(prop.get("value", "0") or 0), name)
        for name, case in _cases(junit_files)
        for prop in case.iter("property")
        if prop.get("name") == CPU_PROPERTY
    ]
    return sorted(rows, reverse=True)[:n]


def affected_paths(since: str | None) -> list[str] | None:
    """The test files `--affected` runs (None: all of them), and one line saying why."""
    files, basis = changed_files(ROOT, since)
    tests = None if files is None else affected_tests(ROOT, files)
    if files is None or tests is None:
        print(f"affected tests: all ({basis}: anything may have changed)", flush=True)
        return None
    print(
        f"affected tests: {len(tests)} modules reach the {len(files)} files of {basis}",
        flush=True,
    )
    return tests


def idle_priority() -> None:
    """In the parallel phase's process before it runs pytest (and so in every process it
    starts: xdist workers, servers, browsers): SCHED_IDLE, the Linux policy whose tasks run only
    when no other task wants the CPU and are preempted by any that wakes; nice 19 elsewhere."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def run_phase(name: str, cmd: list[str] | None) -> tuple[int, float]:
    print(f"\n=== phase: {name} ===", flush=True)
    if cmd is None:
        print("no test module names this phase's marker: nothing to run", flush=True)
        return NO_TESTS_RAN, 0.0
    t0 = time.monotonic()
    code = subprocess.run(cmd, check=False).returncode
    return code, time.monotonic() - t0


def run_side_by_side(
    commands: list[list[str]], workers: int, log: Path
) -> tuple[list[int], list[float]]:
    """The parallel phase at idle priority with its output in `log`, the serial one live beside
    it; the log printed once both have ended. Each phase's wall time from the common start."""
    parallel_cmd, serial_cmd = commands
    print(
        f"\n=== phase: parallel (-n {workers}), at idle priority beside the serial phase; "
        f"its output goes to {log} and is printed when both have ended ===",
        flush=True,
    )
    ended: list[float] = []
    t0 = time.monotonic()
    with log.open("wb") as out:
        parallel = subprocess.Popen(
            parallel_cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=idle_priority
        )

        def note_its_end() -> None:
            parallel.wait()
            ended.append(time.monotonic() - t0)

        watcher = threading.Thread(target=note_its_end, daemon=True)
        watcher.start()
        try:
            serial_code, serial_wall = run_phase("serial", serial_cmd)
            if parallel.poll() is None:
                print("\n=== serial phase done; waiting for the parallel phase ===", flush=True)
            parallel.wait()
            watcher.join()
        finally:
            if parallel.poll() is None:  # interrupted: stop it with us
                parallel.terminate()
                parallel.wait()
    print(f"\n=== phase: parallel (-n {workers}): its output ===", flush=True)
    with log.open("rb") as saved:
        sys.stdout.buffer.write(saved.read())
    sys.stdout.flush()
    return [parallel.returncode, serial_code], [ended[0], serial_wall]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--workers",
        "-n",
        type=int,
        default=None,
        help=f"the parallel phase's xdist workers (default {WORKERS_PER_CORE} per usable core)",
    )
    parser.add_argument(
        "--serial-workers",
        type=int,
        default=DEFAULT_SERIAL_WORKERS,
        help="serial test modules side by side (default 1: one test at a time; 2 is faster "
        "and less strict)",
    )
    parser.add_argument("--select", default=None, help="a marker expression for both phases")
    parser.add_argument("--affected", action="store_true", help="only tests a change can break")
    parser.add_argument("--since", default=None, metavar="REV", help="with --affected: the base")
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="the parallel phase at idle priority beside the serial one (faster, less strict)",
    )
    parser.add_argument(
        "--reports", default=None, metavar="DIR", help="keep the phases' JUnit reports in DIR"
    )
    args, extra = parser.parse_known_args(argv)
    if args.since is not None and not args.affected:
        parser.error("--since goes with --affected")
    if args.workers is None:
        args.workers = default_workers()
    elif args.workers < 1:
        parser.error(f"--workers must be at least 1 (got {args.workers})")
    if args.affected:
        try:
            paths = affected_paths(args.since)
        except ValueError as exc:
            print(f"tests.phases: {exc}", file=sys.stderr)
            return BAD_USAGE
        if paths == []:
            print("nothing a test reaches has changed: no test to run (make test runs them all)")
            return 0
        extra = [*extra, *(paths or [])]
    with tempfile.TemporaryDirectory(prefix="peakload-phases-") as tmp:
        reports = Path(args.reports or tmp)
        reports.mkdir(parents=True, exist_ok=True)
        junits = [reports / f"{phase}.xml" for phase in PHASES]
        commands = [
            None
            if (narrowed := narrowed_to_marked_modules(phase, extra)) is None
            else phase_command(
                args.workers, args.select, phase, junit, narrowed, args.serial_workers
            )
            for phase, junit in zip(PHASES, junits, strict=True)
        ]
        started = time.monotonic()
        if args.overlap and commands[0] is not None and commands[1] is not None:
            codes, walls = run_side_by_side(
                [commands[0], commands[1]], args.workers, reports / "parallel.log"
            )
            alone_code, alone_wall = run_phase("alone (nothing beside it)", commands[2])
            codes, walls = [*codes, alone_code], [*walls, alone_wall]
        else:
            names = (
                f"parallel (-n {args.workers})",
                "serial" if args.serial_workers == 1 else f"serial (-n {args.serial_workers})",
                "alone",
            )
            done = [run_phase(name, cmd) for name, cmd in zip(names, commands, strict=True)]
            codes, walls = [c for c, _ in done], [w for _, w in done]
        total = time.monotonic() - started
        print(f"\n=== the {SLOWEST} slowest tests of the whole run (setup+call+teardown) ===")
        for seconds, test in slowest(junits):
            print(f"{seconds:8.2f}s {test}")
        used = hungriest(junits, n=10**9)
        print(f"\n=== the {SLOWEST} tests that used the most CPU (own + children) ===")
        for seconds, test in used[:SLOWEST]:
            print(f"{seconds:8.2f}s {test}")
        print(f"CPU over all {len(used)} tests: {sum(s for s, _ in used):.0f} s")
    rc = run_exit_code(codes)
    ran = zip(PHASES, walls, codes, strict=True)
    phases = ", ".join(f"{n} {w:.0f} s exit {c}" for n, w, c in ran)
    print(f"\n=== {phases}; total {total:.0f} s; exit {rc} ===")
    return rc


if __name__ == "__main__":
    sys.exit(main())
