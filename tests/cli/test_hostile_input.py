"""Hostile input and hard stops (issue 15), as a user types them: each case gets one clear
message, the documented exit code and no traceback, and the store is checked afterwards (no run
row for a refused spec, no `running` row left, no secret in a dump)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from analysis.verdicts.exitcodes import Exit
from tests.cli.test_run_command import LOOSE_VALIDITY, count_runs, peakload
from tests.support.cli import PEAKLOAD, ROOT
from tests.support.sim import SimProcess
from tests.support.stores import TIMESCALE_ENV, FreshDatabase

pytestmark = pytest.mark.integration

UNREACHABLE = "http://127.0.0.1:9/v1"  # refused specs must fail before any connection


@pytest.fixture
def one_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """One fresh migrated database (TimescaleDB when configured, else the embedded server):
    these cases are about input, not about the store's two flavours."""
    admin = os.environ.get(TIMESCALE_ENV, "").strip() or str(request.getfixturevalue("plain_url"))
    db = FreshDatabase(admin)
    yield db.url
    db.drop()


def spec(base_url: str, load: str = "concurrency = [1]\nduration_s = 1.0", **kw: str) -> str:
    target = kw.get("target", "")
    workload = kw.get("workload", "prompt_tokens = 16\noutput_tokens = 8")
    top = kw.get("top", "")
    return f"""
name = "hostile"
{top}
[target]
api = "openai-chat"
base_url = "{base_url}"
model = "m"
{target}
[workload]
{workload}
[load]
{load}
"""


def running_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM runs WHERE status IN ('pending', 'running')"
        ).fetchone()
    return int(row[0]) if row else 0


def assert_one_clear_message(proc: subprocess.CompletedProcess[str], code: int, *want: str) -> None:
    err = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, err, proc.stdout)
    assert "Traceback" not in err + proc.stdout, err
    assert len(err.splitlines()) <= 2, err
    for w in want:
        assert w.lower() in err.lower(), err


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


REFUSED_SPECS = {
    "concurrency_1e20": (
        {"load": "concurrency = [99999999999999999999]\nduration_s = 1.0"},
        ["per-process ceiling", "1e+20 streams", "KiB per stream", "available"],
    ),
    "concurrency_1e9_cap_4": (
        {"load": "concurrency = [1000000000]\nmax_concurrency = 4\nduration_s = 1.0"},
        ["1,000,000,000 streams", "per-process ceiling"],
    ),
    "concurrency_true": (
        {"load": "concurrency = [true]\nduration_s = 1.0"},
        ["load.concurrency[0]", "valid integer"],
    ),
    "duration_inf": ({"load": "concurrency = [1]\nduration_s = inf"}, ["load.duration_s"]),
    "duration_1e300": ({"load": "concurrency = [1]\nduration_s = 1e300"}, ["load.duration_s"]),
    "nul_in_label": ({"top": '[labels]\nmodel = "a\\u0000b"'}, ["labels.model", "NUL"]),
    "normal_min_over_max": (
        {"workload": 'output_tokens = {dist = "normal", mean = 50, std = 5, min = 90, max = 10}'},
        ["workload.output_tokens", "max (10) is below min (90)"],
    ),
    "lognormal_min_over_max": (
        {
            "workload": 'prompt_tokens = {dist = "lognormal", median = 50, sigma = 0.5, '
            "min = 90, max = 10}"
        },
        ["workload.prompt_tokens", "max (10) is below min (90)"],
    ),
    "fragment_key": ({"base_url": "http://127.0.0.1:9/v1#key=sk-canary"}, ["fragment"]),
    "header_name_with_space": (
        {"target": 'headers = {"authorization " = "Bearer sk-canary"}'},
        ["'authorization '", "not an HTTP header name"],
    ),
    "headers_env_unset": (
        {"target": 'headers_env = {X-Auth-Token = "PEAKLOAD_TEST_UNSET_VAR"}'},
        ["PEAKLOAD_TEST_UNSET_VAR", "not set"],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_SPECS))
def test_refused_specs_leave_nothing(case: str, one_store: str, tmp_path: Path) -> None:
    kw, want = REFUSED_SPECS[case]
    base_url = kw.pop("base_url", UNREACHABLE)
    path = write(tmp_path, "s.toml", spec(base_url, **kw))
    t0 = time.monotonic()
    proc = peakload(["run", str(path)], one_store, tmp_path)
    elapsed = time.monotonic() - t0
    assert_one_clear_message(proc, Exit.BAD_INPUT, *want)
    assert "sk-canary" not in proc.stderr + proc.stdout
    assert count_runs(one_store) == 0
    print(f"{case}: refused in {elapsed:.2f} s (process start and imports included)")


BAD_FILES = {
    "trace_all_past_duration": ("trace", '{"t": 5}\n{"t": 7.5}\n', "nothing would be sent"),
    "trace_malformed": ("trace", '{"t": 0.1}\nnot json\n', "line 2"),
    "trace_empty": ("trace", "\n", "trace is empty"),
    "trace_negative_time": ("trace", '{"t": -1}\n', '"t" must be >= 0'),
    "dataset_malformed": ("dataset", '{"prompt": "hi"}\n{oops\n', "line 2: not JSON"),
    "dataset_empty": ("dataset", "", "dataset is empty"),
    "dataset_nul": ("dataset", '{"prompt": "a\\u0000b"}\n', "NUL"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_trace_or_dataset_is_refused_before_the_run_row(
    case: str, one_store: str, tmp_path: Path
) -> None:
    kind, text, want = BAD_FILES[case]
    data = write(tmp_path, "data.jsonl", text)
    if kind == "trace":
        text_spec = spec(UNREACHABLE, load=f'trace = "{data}"\nduration_s = 2.0')
    else:
        text_spec = spec(UNREACHABLE, workload=f'dataset = "{data}"\noutput_tokens = 4')
    proc = peakload(["run", str(write(tmp_path, "s.toml", text_spec))], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, want, str(data))
    assert count_runs(one_store) == 0


def test_a_failure_after_the_run_row_ends_failed_with_its_reason(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    # the store refuses the writer's COPY mid-run: the run row exists by then
    path = write(tmp_path, "s.toml", spec(sim.base_url, load="concurrency = [2]\nduration_s = 3"))
    proc = subprocess.Popen(
        [*PEAKLOAD, "run", str(path)],
        env={**os.environ, "PEAKLOAD_DATABASE_URL": one_store, "PEAKLOAD_HOME": str(tmp_path)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_id = wait_for_status(one_store, "running")
    with psycopg.connect(one_store, autocommit=True) as conn:
        conn.execute("ALTER TABLE runs ADD CONSTRAINT no_end CHECK (status <> 'completed')")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == Exit.PARTIAL, err
    assert "Traceback" not in err + out and f"run {run_id} failed" in err, err
    with psycopg.connect(one_store) as conn:
        row = conn.execute(
            "SELECT status, status_reason FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        shards = conn.execute(
            "SELECT count(*) FROM shards WHERE run_id = %s AND state IN ('running', 'planned')",
            (run_id,),
        ).fetchone()
    assert row is not None and row[0] == "failed" and "no_end" in row[1]
    assert shards is not None and shards[0] == 0
    assert running_rows(one_store) == 0


def wait_for_status(url: str, status: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT run_id::text FROM runs WHERE status = %s ORDER BY created_at DESC",
                (status,),
            ).fetchone()
        if row:
            return str(row[0])
        time.sleep(0.2)
    raise AssertionError(f"no run reached {status} within {timeout_s} s")


def start_long_run(sim: SimProcess, url: str, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    path = write(
        tmp_path, "long.toml", spec(sim.base_url, load="concurrency = [2]\nduration_s = 120")
    )
    proc = subprocess.Popen(
        [*PEAKLOAD, "run", str(path), "--quiet"],
        env={**os.environ, "PEAKLOAD_DATABASE_URL": url, "PEAKLOAD_HOME": str(tmp_path)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, wait_for_status(url, "running")


def test_a_killed_local_run_is_detected_and_marked(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    proc, run_id = start_long_run(sim, one_store, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    runs = peakload(["runs", "--json"], one_store, tmp_path)
    assert runs.returncode == 0, runs.stderr
    row = next(json.loads(x) for x in runs.stdout.splitlines() if run_id in x)
    assert row["status"] == "failed"
    with psycopg.connect(one_store) as conn:
        reason = conn.execute(
            "SELECT status_reason FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert reason is not None and "is gone" in reason[0], reason
    assert running_rows(one_store) == 0
    # and a dead run's report is a sentence, not a traceback
    report = peakload(["report", run_id], one_store, tmp_path)
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr + report.stdout
    abort = peakload(["abort", run_id], one_store, tmp_path)
    assert abort.returncode == 0 and "already ended (failed)" in abort.stdout, abort.stdout


def test_abort_stops_a_local_run(sim: SimProcess, one_store: str, tmp_path: Path) -> None:
    proc, run_id = start_long_run(sim, one_store, tmp_path)
    t0 = time.monotonic()
    abort = peakload(["abort", run_id, "--reason", "enough"], one_store, tmp_path)
    assert abort.returncode == 0, abort.stderr
    assert "local run" in abort.stdout, abort.stdout
    out, err = proc.communicate(timeout=60)
    stopped_s = time.monotonic() - t0
    assert proc.returncode == Exit.PARTIAL, err
    assert "Traceback" not in err + out
    with psycopg.connect(one_store) as conn:
        row = conn.execute(
            "SELECT status, status_reason FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert row is not None and row[0] == "aborted" and row[1] == "enough", row
    assert running_rows(one_store) == 0
    print(f"local run stopped {stopped_s:.1f} s after `peakload abort` was started")


def empty_run(url: str, run_id: str | None = None, *, levels: bool = False) -> str:
    """A run row with no levels and no requests, as a run that died in its warm-up leaves."""
    from loadgen.runspec.spec import spec_from_dict
    from workers.store import runs as store_runs

    run_spec = spec_from_dict(
        {
            "name": "empty",
            "target": {"api": "openai-chat", "base_url": UNREACHABLE, "model": "m"},
            "load": {"concurrency": [1], "duration_s": 1.0},
        }
    )
    run_id = run_id or str(uuid.uuid4())
    with psycopg.connect(url, autocommit=True) as conn:
        store_runs.create_run(conn, run_id, run_spec, mode="local", owner="elsewhere:1")
        if levels:
            store_runs.upsert_levels(
                conn, run_id, [{"level": 0, "kind": "concurrency", "value": 1, "duration_s": 1}]
            )
        store_runs.fail_run(conn, run_id, "its process died during warm-up")
    return run_id


@pytest.mark.parametrize("levels", [False, True], ids=["no_levels", "levels_no_requests"])
def test_empty_run_gets_a_sentence_from_report_sla_compare(
    levels: bool, one_store: str, tmp_path: Path
) -> None:
    run_id = empty_run(one_store, levels=levels)
    claims = write(
        tmp_path, "c.toml", '[[claims]]\nmetric = "ttft_ms"\npercentile = 99\nthreshold = 500\n'
    )
    report = peakload(["report", run_id, "--json", str(tmp_path / "r.json")], one_store, tmp_path)
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr + report.stdout
    assert "no requests" in report.stdout, report.stdout
    html = peakload(["report", run_id, "--html", str(tmp_path / "r.html")], one_store, tmp_path)
    assert html.returncode == 0 and "Traceback" not in html.stderr, html.stderr
    sla = peakload(["sla", run_id, "--claims", str(claims)], one_store, tmp_path)
    assert sla.returncode not in (0, 1) and "Traceback" not in sla.stderr + sla.stdout, sla.stderr
    cmp = peakload(["compare", run_id, run_id], one_store, tmp_path)
    assert "Traceback" not in cmp.stderr + cmp.stdout, cmp.stderr
    assert cmp.returncode == Exit.CANNOT_COMPARE, cmp.stdout + cmp.stderr


class _Static(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_a_static_web_server_is_not_an_llm_api(one_store: str, tmp_path: Path) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Static)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        proc = peakload(["run", str(write(tmp_path, "s.toml", spec(url)))], one_store, tmp_path)
    finally:
        srv.shutdown()
        srv.server_close()
    assert_one_clear_message(proc, Exit.BAD_INPUT, "not an LLM API: a web server answered 501")
    assert count_runs(one_store) == 0


def test_https_to_a_plain_http_port_says_so(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    url = sim.base_url.replace("http://", "https://")
    proc = peakload(["run", str(write(tmp_path, "s.toml", spec(url)))], one_store, tmp_path)
    assert_one_clear_message(proc, Exit.BAD_INPUT, "TLS handshake failed", "plain HTTP", "http://")
    assert count_runs(one_store) == 0


@pytest.mark.parametrize(
    "override", ["http://192.0.0.192:8000/v1", "http://169.254.169.254/v1", "http://10.1.2.3/v1"]
)
def test_worker_target_override_is_checked_against_the_policy(
    override: str, one_store: str, tmp_path: Path
) -> None:
    proc = peakload(
        ["worker", "--region", "eu", "--target-override", override], one_store, tmp_path
    )
    assert_one_clear_message(
        proc, Exit.BAD_INPUT, "refused" if "169.254" in override else "resolves to"
    )


@pytest.mark.slow  # 15-35 s in the loaded parallel phase: two runs, then five commands as typed
def test_runs_and_report_fit_their_content_when_piped(
    sim: SimProcess, one_store: str, tmp_path: Path
) -> None:
    long_name = "a-rather-long-run-name-that-an-80-column-table-would-fold-" + "x" * 30
    text = spec(sim.base_url, top="max_error_rate = 1.0") + LOOSE_VALIDITY
    text = text.replace('name = "hostile"', f'name = "{long_name}"')
    path = write(tmp_path, "s.toml", text)
    for _ in range(2):
        done = peakload(["run", str(path), "--quiet"], one_store, tmp_path)
        assert done.returncode == Exit.PASSED, done.stderr  # no budget, loose validity bounds
    runs = peakload(["runs"], one_store, tmp_path)
    assert runs.returncode == 0, runs.stderr
    assert long_name in runs.stdout and sim.base_url in runs.stdout and "…" not in runs.stdout
    plain = peakload(["runs", "--format", "plain"], one_store, tmp_path)
    lines = plain.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].split("\t")[0] == "id", plain.stdout
    assert all(len(x.split("\t")) == len(lines[0].split("\t")) for x in lines)
    # a name shared by two runs lists both instead of taking the newest
    report = peakload(["report", long_name], one_store, tmp_path)
    assert report.returncode == Exit.MISSING and "matches 2 runs" in report.stderr, report.stderr
    with psycopg.connect(one_store) as conn:
        ids = [r[0] for r in conn.execute("SELECT run_id::text FROM runs").fetchall()]
        written = conn.execute(
            "SELECT s.records_written, (SELECT count(*) FROM requests q WHERE q.run_id = s.run_id"
            " AND q.shard_id = s.shard_id) FROM shards s"
        ).fetchall()
    assert all(i in report.stderr for i in ids), report.stderr
    assert all(w == n and n > 0 for w, n in written), written
    # an ambiguous id prefix lists the runs it matches
    a = empty_run(one_store, "abcdef01-0000-4000-8000-000000000001")
    b = empty_run(one_store, "abcdef02-0000-4000-8000-000000000002")
    amb = peakload(["report", "abcdef0"], one_store, tmp_path)
    assert amb.returncode == Exit.MISSING and a in amb.stderr and b in amb.stderr, amb.stderr
    assert "Traceback" not in amb.stderr
