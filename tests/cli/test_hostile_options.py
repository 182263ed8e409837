"""Hostile input, second round (issue 22), as a user types it: numbers that are not finite,
output files that cannot be written, files that are not UTF-8 or not JSON, a server that
accepts and never answers, run references with wildcard characters. Each is refused before any
request with one message naming the field: exit code, store and the sim's own log checked."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.verdicts.exitcodes import Exit
from tests.cli.test_hostile_input import UNREACHABLE, assert_one_clear_message, one_store, spec
from tests.cli.test_hostile_input import write as write_text
from tests.cli.test_run_command import count_runs, peakload
from tests.support.sim import SimProcess

pytestmark = pytest.mark.integration
__all__ = ["one_store"]

NUMBERS = {
    "compare_threshold_nan": (["compare", "a", "b", "--threshold-pct", "nan"], "--threshold-pct"),
    "compare_threshold_inf": (["compare", "a", "b", "--threshold-pct", "inf"], "--threshold-pct"),
    "compare_confidence_nan": (["compare", "a", "b", "--confidence", "nan"], "--confidence"),
    "compare_percentile_nan": (["compare", "a", "b", "--percentile", "nan"], "--percentile"),
    "sla_confidence_nan": (
        ["sla", "a", "--claims", "c.toml", "--confidence", "nan"],
        "--confidence",
    ),
    "report_percentile_nan": (["report", "a", "--percentile", "nan"], "--percentile"),
    "nightly_threshold_nan": (["nightly", "a", "--threshold-pct", "-inf"], "--threshold-pct"),
    "submit_ready_timeout_nan": (["submit", "s.toml", "--ready-timeout", "nan"], "--ready-timeout"),
    "submit_ready_timeout_negative": (
        ["submit", "s.toml", "--ready-timeout", "-1"],
        "--ready-timeout",
    ),
}


@pytest.mark.parametrize("case", sorted(NUMBERS))
def test_numbers_that_are_not_finite_or_in_range_are_refused(
    case: str, one_store: str, tmp_path: Path
) -> None:
    args, option = NUMBERS[case]
    assert_usage_error(peakload(args, one_store, tmp_path), f"Invalid value for '{option}'")


def assert_usage_error(proc: subprocess.CompletedProcess[str], want: str) -> None:
    """Click's refusal of an option: exit 2, its usage line, one `Error:` line naming it."""
    assert proc.returncode == Exit.BAD_INPUT, (proc.returncode, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and want in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_sla_claims_that_are_not_finite_are_refused(one_store: str, tmp_path: Path) -> None:
    claims = write_text(tmp_path, "c.toml", '[[claims]]\nmetric = "ttft_ms"\npercentile = 99\n'
                        "threshold = inf\n")  # fmt: skip
    proc = peakload(["sla", "some-run", "--claims", str(claims)], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, "threshold")


def test_an_unwritable_output_is_refused_before_any_request(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    path = write_text(tmp_path, "s.toml", spec(sim.base_url))
    for option, target in (("--json", "/no/such/dir/x.json"), ("--json", str(tmp_path))):
        proc = peakload(["run", str(path), option, target], one_store, tmp_path)
        assert_usage_error(proc, f"Invalid value for '{option}'")
    assert count_runs(one_store) == 0
    assert sim.read_truth() == []  # nothing was sent, not even the probe
    for args in (["report", "x", "--html", str(tmp_path)],
                 ["report", "x", "--json", "/no/such/dir/r.json"],
                 ["export", "x", "--format", "csv", "--out", "/no/such/dir/e.csv"]):  # fmt: skip
        proc = peakload(args, one_store, tmp_path)
        assert_usage_error(proc, "Invalid value for")


BAD_BYTES = {
    "dataset_not_utf8": ("dataset", b'{"prompt": "caf\xe9"}\n', "line 1: not UTF-8"),
    "dataset_is_a_folder": ("dataset", None, "is a folder"),
    "trace_not_utf8": ("trace", b'{"t": 0.1}\n{"t": 0.2, "x": "\xff"}\n', "line 2: not UTF-8"),
    "trace_not_json": ("trace", b'{"t": 0.1}\n{"t": 0.2}\n[oops\n', "line 3: not JSON"),
    "trace_is_a_folder": ("trace", None, "is a folder"),
}


@pytest.mark.parametrize("case", sorted(BAD_BYTES))
def test_files_that_cannot_be_read_are_named_with_their_line_before_any_request(
    case: str, sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    kind, data, want = BAD_BYTES[case]
    path = tmp_path / "data.jsonl"
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    if kind == "trace":
        text = spec(sim.base_url, load=f'trace = "{path}"\nduration_s = 2.0')
    else:
        text = spec(sim.base_url, workload=f'dataset = "{path}"\noutput_tokens = 4')
    proc = peakload(["run", str(write_text(tmp_path, "s.toml", text))], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, want, str(path))
    assert count_runs(one_store) == 0
    assert sim.read_truth() == []


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts every connection and never sends a byte."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    stop.set()
    thread.join(5)
    for c in held:
        c.close()
    srv.close()


TIMEOUTS = "connect_timeout_s = 2\nidle_timeout_s = 2\ndeadline_s = 3"


@pytest.mark.parametrize("args", [[], ["--no-probe"]], ids=["probe", "preflight"])
def test_a_server_that_never_answers_is_named_so_within_the_spec_timeouts(
    args: list[str], silent_server: str, one_store: str, tmp_path: Path
) -> None:
    path = write_text(tmp_path, "s.toml", spec(silent_server, target=TIMEOUTS))
    t0 = time.monotonic()
    proc = peakload(["run", str(path), *args], one_store, tmp_path)
    elapsed = time.monotonic() - t0
    want = "gave no answer to the probe" if not args else "accepted the connection but sent no"
    assert_one_clear_message(proc, Exit.BAD_INPUT, want, "target.deadline_s")
    assert "refused" not in proc.stderr
    assert elapsed < 30, elapsed  # two or three 3 s deadlines and start-up, never 5 x 60 s
    assert count_runs(one_store) == 0


def test_the_probe_command_stops_at_a_server_that_never_answers(
    silent_server: str, one_store: str, tmp_path: Path
) -> None:
    path = write_text(tmp_path, "s.toml", spec(silent_server, target=TIMEOUTS))
    t0 = time.monotonic()
    proc = peakload(["probe", silent_server, "--spec", str(path)], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, "gave no answer to the probe")
    assert time.monotonic() - t0 < 30


def test_connection_refused_is_named_so(one_store: str, tmp_path: Path) -> None:
    path = write_text(tmp_path, "s.toml", spec(UNREACHABLE, target=TIMEOUTS))
    proc = peakload(["probe", UNREACHABLE, "--spec", str(path)], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, "connection refused")


def test_the_model_list_keeps_the_base_urls_query_as_its_query(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    url = sim.base_url + "?api-version=2024-06"  # the old join asked for /v1?api-version=…/models
    proc = peakload(["probe", url, "--check", "stream"], one_store, tmp_path)
    assert proc.returncode == Exit.PASSED, proc.stderr
    assert "honoured" in proc.stdout


@pytest.mark.slow  # 40 to 80 s: two runs, then sixteen commands, each as a user types it
def test_run_references_are_literal(sim: SimProcess, one_store: str, tmp_path: Path) -> None:
    path = write_text(tmp_path, "s.toml", spec(sim.base_url))
    for _ in range(2):
        peakload(["run", str(path), "--no-probe", "--quiet"], one_store, tmp_path)
    assert count_runs(one_store) == 2
    for ref in ("%", "_", "*", "?", "%-%", "____", "[0-9]*"):
        proc = peakload(["report", ref], one_store, tmp_path)
        assert_one_clear_message(proc, Exit.MISSING, f"no run matches {ref!r}")
        runs = peakload(["runs", "--name", ref, "--format", "plain"], one_store, tmp_path)
        assert runs.returncode == Exit.PASSED, runs.stderr
        assert len(runs.stdout.strip().splitlines()) <= 1, runs.stdout  # the header alone
    both = peakload(["report", "hostile"], one_store, tmp_path)  # a name two runs have
    assert_one_clear_message(both, Exit.MISSING, "matches 2 runs")
