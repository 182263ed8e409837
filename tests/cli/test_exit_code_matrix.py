"""Every command in `peakload --help` against the one exit-code table (analysis.verdicts.exitcodes):
for each, the exact code of a success, a bad input, an infrastructure error (the store, or the
broker, unreachable: a closed loopback port) and a missing run where the command takes one.
Two synthetic runs (tests/support/correlated_runs) are inserted into a fresh store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from analysis.verdicts.exitcodes import Exit
from tests.analysis.storedata import insert_run
from tests.cli.test_run_command import peakload
from tests.support import correlated_runs as cr
from tests.support.stores import TIMESCALE_ENV, FreshDatabase

pytestmark = pytest.mark.integration

A = "00000000-0000-0000-0000-00000000a021"
B = "00000000-0000-0000-0000-00000000b021"
NOWHERE = "postgresql://peakload:x@127.0.0.1:1/peakload?connect_timeout=2"
MISSING = str(uuid.UUID(int=0x21_21))
MODEL = cr.LevelModel(requests=120, chunks=(10, 30))


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    import os

    admin = os.environ.get(TIMESCALE_ENV, "").strip() or str(request.getfixturevalue("plain_url"))
    db = FreshDatabase(admin)
    with psycopg.connect(db.url, autocommit=True) as conn:
        for rid, seed in ((A, 1), (B, 2)):
            run, levels, reqs = cr.run_rows(rid, [MODEL], seed, name=f"m-{rid[-4:]}")
            # synthetic requests do not keep the level's users busy: the load delivered is not
            # what these exit codes are about
            run["spec"] = {**run["spec"], "validity": {"max_load_shortfall": 0.99}}
            insert_run(conn, run, levels, reqs)
    yield db.url
    db.drop()


def _files(tmp: Path) -> dict[str, str]:
    claims = tmp / "claims.toml"
    claims.write_text(
        'max_error_rate = 1.0\n[[claims]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 1e5\n'
    )
    spec = tmp / "spec.toml"
    spec.write_text(
        'name = "matrix"\n[target]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m"\n[workload]\nprompt_tokens = 8\noutput_tokens = 4\n'
        "[load]\nconcurrency = [1]\nduration_s = 1.0\n"
    )
    return {"claims": str(claims), "spec": str(spec), "out": str(tmp / "x.csv")}


# (command, args, the code) per case; {claims} {spec} {out} are filled in
SUCCESS = [
    ("runs", []),
    ("report", [A]),
    ("sla", [A, "--claims", "{claims}"]),
    ("export", [A, "--format", "csv", "--out", "{out}"]),
    ("compare", [A, A, "--metric", "ttft_ms"]),
    ("abort", [A]),  # already ended: nothing to abort, done
    ("schedule", ["list"]),
    ("presets", []),
    ("db", ["status"]),
]
BAD_INPUT = [
    ("runs", ["--format", "bogus"]),
    ("report", [A, "--bogus"]),
    ("sla", [A, "--claims", "/nonexistent/claims.toml"]),
    ("export", [A, "--format", "bogus"]),
    ("compare", [A]),  # one run and no --candidate
    ("compare", [A, B, "--primary", "bogus_ms:50"]),
    ("abort", ["not-a-run-id"]),
    ("nightly", ["nightly-x", "--metric", "bogus"]),
    ("schedule", ["add", "{spec}"]),  # no --cron
    ("presets", ["--bogus"]),
    ("db", ["nosuch"]),
    ("run", ["/nonexistent/spec.toml"]),
    ("submit", ["/nonexistent/spec.toml"]),
    ("demo", ["--bogus"]),
    ("probe", []),
    ("sim", ["--bogus"]),
    ("ui", ["--port", "0"]),
    ("ui", ["--host", "0.0.0.0"]),  # beyond localhost without a login: refused
    ("worker", ["--bogus"]),
]
INFRA = [
    ("runs", []),
    ("report", [A]),
    ("sla", [A, "--claims", "{claims}"]),
    ("export", [A, "--format", "csv", "--out", "{out}"]),
    ("compare", [A, B]),
    ("abort", [A]),
    ("nightly", ["nightly-x"]),
    ("schedule", ["list"]),
    ("schedule", ["remove", "nosuch"]),
    ("run", ["{spec}", "--no-probe"]),
]
MISSING_RUN = [
    ("report", [MISSING]),
    ("sla", [MISSING, "--claims", "{claims}"]),
    ("export", [MISSING, "--format", "csv", "--out", "{out}"]),
    ("compare", [A, MISSING]),
    ("compare", [A, B, "--candidate", MISSING]),
    ("abort", [MISSING]),
    ("nightly", ["no-such-schedule"]),
    ("schedule", ["remove", "no-such-schedule"]),
]


def _args(args: list[str], files: dict[str, str]) -> list[str]:
    return [a.format(**files) for a in args]


@pytest.mark.parametrize(
    ("case", "command", "args", "url", "code"),
    [("success", c, a, "store", Exit.PASSED) for c, a in SUCCESS]
    + [("bad input", c, a, "store", Exit.BAD_INPUT) for c, a in BAD_INPUT]
    + [("infrastructure", c, a, "nowhere", Exit.BAD_INPUT) for c, a in INFRA]
    + [("missing run", c, a, "store", Exit.MISSING) for c, a in MISSING_RUN],
    ids=lambda v: v if isinstance(v, str) and " " not in v else None,
)
def test_exact_code(
    case: str, command: str, args: list[str], url: str, code: Exit, store: str, tmp_path: Path
) -> None:
    files = _files(tmp_path)
    proc = peakload(
        [command, *_args(args, files)],
        store if url == "store" else NOWHERE,
        tmp_path,
        PEAKLOAD_REDIS_URL="redis://127.0.0.1:1/0",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, f"{case}: {command} {args}: exit {proc.returncode}\n{out}"
    assert "Traceback" not in out, out


def test_submit_without_wait_is_not_a_pass_and_broker_down_is_infrastructure(
    tmp_path: Path, store: str
) -> None:
    """submit needs the broker: unreachable, exit 2 (nothing started)."""
    files = _files(tmp_path)
    proc = peakload(
        ["submit", files["spec"], "--no-probe", "--no-preflight"],
        store,
        tmp_path,
        PEAKLOAD_REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert proc.returncode == Exit.BAD_INPUT, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
