"""S6: a server that echoes the request (its URL and headers) in every error answer, JSON error,
HTML page and SSE error event (`python -m loadgen.sim --echo-request`). Fired at every path a
secret could take — `run` (with its probe), `probe`, the probe's and preflight's refusals,
Locust mode, `report` in every format, `export`, `runs`, the UI's pages and a distributed
`submit` — no secret value (a `headers_env` header, a Basic credential, a query parameter, the
API key) reaches the store (every row of every table), an output, a file or a log."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from analysis.verdicts.exitcodes import Exit
from tests.cli.test_hostile_input import one_store
from tests.cli.test_run_command import peakload
from tests.support.cli import ROOT
from tests.support.sim import SimProcess

pytestmark = pytest.mark.integration
__all__ = ["one_store"]

HDR = "hdr-canary-91c2e7"  # a headers_env header
USER_PW = "alice:pw-canary-3f0a"  # a Basic credential, by headers_env
QRY = "qry-canary/8b+4d"  # a query parameter (percent-encoded on the wire)
KEY = "key-canary-5d8b3a"  # the api_key_env value, not shaped like a key
CANARIES = (HDR, USER_PW, "pw-canary-3f0a", QRY, "qry-canary", KEY)
BASIC = "Basic " + base64.b64encode(USER_PW.encode()).decode()
ENV = {"PEAKLOAD_T_HDR": HDR, "PEAKLOAD_T_BASIC": BASIC, "PEAKLOAD_T_KEY": KEY}
ECHO = ["--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--seed", "7", "--echo-request"]
# Faults drawn by arrival (with ECHO's seed), not by request id: the preflight's random ids made
# its five tries all fail about once in 190 runs (0.35 ** 5). By arrival, the same seed gives the
# run's sequential start (probe, preflight) the same draws every time.
FAULTS = ["--fault", "503=0.15", "--fault", "error_event=0.15", "--fault", "html_error:500=0.05",
          "--fault-draw", "arrival"]  # fmt: skip


def dump_store(url: str) -> str:
    """Every row of every table in the store, as text."""
    out: list[str] = []
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN "
            "('pg_catalog', 'information_schema') AND table_schema NOT LIKE '\\_timescaledb%'"
        ).fetchall()
        for schema, table in tables:
            q = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            out.extend(str(r[0]) for r in conn.execute(q).fetchall())
    return "\n".join(out)


def spec_text(base_url: str, *, query: bool = True, extra: str = "", load: str = "") -> str:
    q = f"?pass={QRY.replace('/', '%2F').replace('+', '%2B')}" if query else ""
    load = load or "concurrency = [2]\nduration_s = 1.5"
    return f"""
name = "echo"
[target]
api = "openai-chat"
base_url = "{base_url}{q}"
model = "m"
api_key_env = "PEAKLOAD_T_KEY"
headers_env = {{X-Auth-Token = "PEAKLOAD_T_HDR", Proxy-Authorization = "PEAKLOAD_T_BASIC"}}
{extra}
[workload]
prompt_tokens = 16
output_tokens = 8
[load]
{load}
"""


def assert_clean(places: dict[str, str]) -> None:
    for where, text in places.items():
        for canary in CANARIES:
            assert canary not in text, f"{canary!r} leaked into the {where}"


@pytest.mark.slow  # 35 to 75 s: runs, every output (report, export, the UI's pages) searched
def test_an_echoing_server_gets_no_secret_into_store_outputs_or_ui(
    sim_factory: Any, one_store: str, tmp_path: Path
) -> None:
    sim: SimProcess = sim_factory([*ECHO, *FAULTS])
    spec = tmp_path / "echo.toml"
    spec.write_text(spec_text(sim.base_url))
    summary = tmp_path / "s.json"
    run = peakload(["run", str(spec), "--json", str(summary)], one_store, tmp_path, **ENV)
    done = json.loads(summary.read_text())
    run_id = done["run_id"]
    # 35 % failures: over the error budget (1), unless the loaded host's self-check fired (4)
    assert run.returncode == (Exit.FAILED if done["valid"] else Exit.INVALID), run.stderr
    outs = {"run output": run.stdout + run.stderr, "run summary": summary.read_text()}
    html, rjson = tmp_path / "r.html", tmp_path / "r.json"
    rep = peakload(["report", run_id, "--html", str(html), "--json", str(rjson)], one_store,
                   tmp_path, **ENV)  # fmt: skip
    assert rep.returncode == Exit.PASSED, rep.stderr
    outs |= {"report": rep.stdout + rep.stderr, "html": html.read_text(), "json": rjson.read_text()}
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"e.{fmt}"
        exp = peakload(["export", run_id, "--format", fmt, "--out", str(out)], one_store, tmp_path)
        assert exp.returncode == Exit.PASSED, exp.stderr
        outs[f"{fmt} export"] = out.read_text()
    runs = peakload(["runs", "--format", "plain"], one_store, tmp_path)
    outs["runs"] = runs.stdout + runs.stderr

    # the probe command, every check, two of them rejected with the echo in the server's error
    rejecting: SimProcess = sim_factory([*ECHO, "--param", "logprobs=reject", "--param",
                                         "seed=reject"])  # fmt: skip
    pspec = tmp_path / "probe.toml"
    pspec.write_text(spec_text(rejecting.base_url, extra="extra_body = {seed = 1}"))
    probe = peakload(["probe", rejecting.base_url, "--spec", str(pspec)], one_store, tmp_path,
                     **ENV)  # fmt: skip
    assert probe.returncode == Exit.FAILED, probe.stderr
    assert "rejected" in probe.stdout and "[REDACTED]" in probe.stdout
    pjson = peakload(["probe", rejecting.base_url, "--spec", str(pspec), "--json"], one_store,
                     tmp_path, **ENV)  # fmt: skip
    outs |= {"probe": probe.stdout + probe.stderr, "probe --json": pjson.stdout + pjson.stderr}
    # the run's probe refuses the rejected parameter, quoting the server's (echoing) error
    refused = peakload(["run", str(pspec)], one_store, tmp_path, **ENV)
    assert refused.returncode == Exit.BAD_INPUT, refused.stderr
    assert "rejects parameter(s)" in refused.stderr and "[REDACTED]" in refused.stderr
    outs["probe refusal"] = refused.stdout + refused.stderr
    # preflight's refusal: every request rejected with the echo in the 400's message
    broken: SimProcess = sim_factory([*ECHO, "--param", "stream=reject"])
    bspec = tmp_path / "broken.toml"
    bspec.write_text(spec_text(broken.base_url))
    pre = peakload(["run", str(bspec), "--no-probe"], one_store, tmp_path, **ENV)
    assert pre.returncode == Exit.BAD_INPUT, pre.stderr
    assert "[REDACTED]" in pre.stderr
    outs["preflight refusal"] = pre.stdout + pre.stderr

    dump = dump_store(one_store)
    assert "[REDACTED]" in dump  # the echoes were stored, scrubbed
    outs["database"] = dump
    outs["ui pages"] = ui_pages(one_store, run_id, tmp_path)
    assert_clean(outs)


def ui_pages(url: str, run_id: str, tmp_path: Path) -> str:
    """The run and runs pages rendered by AppTest in a child process (its own Streamlit state),
    as the text and element tree a person sees."""
    script = f"""
import sys
from streamlit import config
from streamlit.testing.v1 import AppTest
config.set_option("server.address", "127.0.0.1")  # a local app: no login
out = []
for page, params in (("runs", {{}}), ("run", {{"run": {run_id!r}}})):
    at = AppTest.from_file({str(ROOT / "ui" / "app.py")!r}, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"views/{{page}}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    out.append(repr(at._tree))
    for kind in ("markdown", "caption", "error", "warning", "info", "dataframe", "table"):
        out += [repr(e.value) for e in getattr(at, kind)]
sys.stdout.write("\\n".join(out))
"""
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": url, "PYTHONPATH": str(ROOT),
           "PEAKLOAD_ANALYSIS_CACHE": str(tmp_path / "cache")}  # fmt: skip
    env.pop("PEAKLOAD_UI_REQUIRE_AUTH", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert run_id[:8] in done.stdout
    return done.stdout


def test_locust_mode_against_an_echoing_server_leaks_nothing(
    sim_factory: Any, one_store: str, tmp_path: Path
) -> None:
    from tests.support.locust_runs import locust_command, locust_env, run

    sim: SimProcess = sim_factory([*ECHO, *FAULTS])
    spec = tmp_path / "echo.toml"
    spec.write_text(spec_text(sim.base_url, query=False))  # literal values: refused in Locust mode
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(
        "from loadgen.locust import LLMUser\nfrom workers import locust_store\n"
        f"locust_store.install()\nclass U(LLMUser):\n    spec = {str(spec)!r}\n"
    )
    env = {**locust_env(one_store), **ENV}
    out, log = tmp_path / "out", tmp_path / "locust.log"
    cmd = locust_command("--headless", "-u", "2", "-r", "2", "-t", "8s", "--host", sim.base_url,
                         "--csv", str(out), "--exit-code-on-error", "0")  # fmt: skip
    cmd[cmd.index("-f") + 1] = str(locustfile)
    assert run(cmd, env, 90, log) == 0, log.read_text()
    places = {"locust log": log.read_text(), "database": dump_store(one_store)}
    places |= {p.name: p.read_text() for p in tmp_path.glob("out_*.csv")}
    assert "[REDACTED]" in places["database"]  # echoes came back, and were scrubbed
    assert_clean(places)


def test_submit_to_workers_against_an_echoing_server_leaks_nothing(
    sim_factory: Any, cluster: Any, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    sim: SimProcess = sim_factory([*ECHO, *FAULTS])
    cluster.start("eu", concurrency=1, extra_env=ENV)  # the secrets live where requests are sent
    spec = tmp_path / "echo.toml"
    regions = '\n[[regions]]\nname = "eu"\nshare = 1.0\n'
    spec.write_text(spec_text(sim.base_url, query=False, load="rate = [10.0]\nduration_s = 2")
                    + regions)  # fmt: skip
    summary = tmp_path / "s.json"
    done = subprocess.run(
        [sys.executable, "-m", "ui", "submit", str(spec), "--wait", "--json", str(summary)],
        env={**cluster_env, **ENV}, cwd=ROOT, capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip
    assert summary.exists(), f"exit {done.returncode}: {done.stdout}{done.stderr}"
    result = json.loads(summary.read_text())
    assert result["status"] == "completed", done.stderr
    assert done.returncode == (Exit.FAILED if result["valid"] else Exit.INVALID), done.stderr
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    rep = peakload(["report", result["run_id"], "--json", str(tmp_path / "r.json")], url, tmp_path)
    assert rep.returncode == Exit.PASSED, rep.stderr
    places = {"submit output": done.stdout + done.stderr, "summary": summary.read_text()}
    places |= {"worker logs": cluster.logs(), "report": (tmp_path / "r.json").read_text()}
    places["database"] = dump = dump_store(url)
    assert "[REDACTED]" in dump  # echoes came back, and were scrubbed
    assert_clean(places)
