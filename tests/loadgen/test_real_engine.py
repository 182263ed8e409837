"""Against a real engine (RELIABILITY M10, M12): `peakload run` as a user types it, against
llama.cpp's `llama-server` serving SmolLM2-135M with 4 slots, stored in TimescaleDB and analysed
end to end. A sweep past the slot count, a gateway that closes after every response, one whose
idle timeout is shorter than the think time: zero failed requests, every request sent once on
the wire, and the client's TTFT and ITL consistent with the server's own timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.engine import (
    SLOTS,
    LlamaServer,
    server_ms_per_token,
    split_cpus,
)
from tests.support.httpproxy import HttpProxy
from tests.support.stores import FreshDatabase, ledger_check

# alone: client timings against the engine's own, llama-server filling the CPU it is pinned to
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timescale, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_TOKENS = 48  # the server's per-token time spans n-1 gaps over n tokens: 2 % low at 48
ITL_TOLERANCE = 0.10


@pytest.fixture
def db(timescale_url: str, fresh_database: Callable[..., FreshDatabase]) -> str:
    return fresh_database(timescale_url).url


def spec_text(
    base_url: str, metrics_url: str, load: str, output_tokens: int = 24, transport: str = "auto"
) -> str:
    return f"""
name = "real-engine"
[target]
api = "openai-chat"
base_url = "{base_url}"
model = "smollm2"
ignore_eos = true
metrics_url = "{metrics_url}"
transport = "{transport}"
[workload]
prompt_tokens = 24
output_tokens = {output_tokens}
[load]
{load}
[labels]
engine = "llama.cpp"
model = "SmolLM2-135M-Instruct"
quantization = "Q4_1"
"""


def peakload(args: list[str], db_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess, pinned away from the server's CPU where there are two."""
    _, client_cpus = split_cpus()
    pin = ["taskset", "-c", client_cpus] if client_cpus else []
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": db_url, "PEAKLOAD_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [*pin, sys.executable, "-m", "ui", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
        check=False,
    )


def run(spec: str, db_url: str, tmp_path: Path, *flags: str) -> dict[str, Any]:
    """`peakload run` (with `flags`) then `peakload report` on the stored run; its summary."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    out = tmp_path / "summary.json"
    proc = peakload(["run", str(path), "--json", str(out), *flags], db_url, tmp_path)
    # 0 passed, 3 undecidable (too few samples for the default error budget's verdict), 4 the
    # generator's self-check flagged the run (a shared machine): the requests still count. Never
    # 1 (the error budget disproved: failed requests) nor 5 (partial).
    assert proc.returncode in (0, 3, 4), proc.stdout + proc.stderr
    summary: dict[str, Any] = json.loads(out.read_text())
    report = tmp_path / "report.json"
    rep = peakload(["report", summary["run_id"], "--json", str(report)], db_url, tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert report.stat().st_size > 0
    return summary


def assert_no_failures(summary: dict[str, Any]) -> None:
    for lv in summary["levels"]:
        assert lv["requests_failed"] == 0, (
            f"level {lv['level']}: {lv['requests_failed']} of "
            f"{lv['requests_ok'] + lv['requests_failed']} failed: {lv.get('failures_by_kind')}"
        )
        assert lv["requests_ok"] > 0, f"level {lv['level']} completed no request"


def stored_rows(db_url: str, run_id: str) -> list[dict[str, Any]]:
    """The run's request rows: every one ok, the ledger balanced, each ignore_eos answer whole."""
    with psycopg.connect(db_url) as conn:
        scheduled = conn.execute(
            "SELECT requests_scheduled FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        cur = conn.execute("SELECT * FROM requests WHERE run_id = %s", (run_id,))
        names = [d.name for d in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        assert scheduled is not None
        assert ledger_check(conn, run_id, [r["request_id"] for r in rows]) == scheduled[0]
    bad = [
        (r["outcome"], r["error_phase"], r["error_detail"]) for r in rows if r["outcome"] != "ok"
    ]
    assert not bad, f"{len(bad)} of {len(rows)} stored requests failed, e.g. {bad[:3]}"
    short = [r["output_tokens"] for r in rows if r["output_tokens"] != r["max_tokens"]]
    assert not short, f"ignore_eos answers of the wrong length: {short[:5]}"
    return rows


def resent_total(rows: list[dict[str, Any]]) -> int:
    return sum(int(r.get("resent") or 0) for r in rows)


def assert_sent_once_on_the_wire(proxy: HttpProxy, rows: list[dict[str, Any]]) -> None:
    """Every stored request reached the server exactly once (a re-send after a dead reused
    connection never got there the first time); other requests the proxy saw are the run's
    own probes (prompt-length calibration), not records."""
    seen = Counter(proxy.request_ids)
    ids = [str(r["request_id"]) for r in rows]
    missing = [i for i in ids if seen[i] == 0]
    twice = {i: seen[i] for i in ids if seen[i] > 1}
    assert not missing, f"{len(missing)} of {len(ids)} stored requests never reached the server"
    assert not twice, f"requests that reached the server more than once: {twice}"


def server_metric_max(db_url: str, run_id: str, name: str) -> float | None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT max(value) FROM server_metrics WHERE run_id = %s AND name = %s",
            (run_id, name),
        ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def test_a_sweep_past_the_slots_fails_no_request(
    llama: LlamaServer, db: str, tmp_path: Path
) -> None:
    levels = [1, 2, 4, 8]
    assert max(levels) > SLOTS  # the last level queues at the server
    load = f"concurrency = {levels}\nduration_s = 4\nwarmup_s = 1"
    summary = run(spec_text(llama.base_url, llama.metrics_url, load), db, tmp_path)
    assert [lv["level"] for lv in summary["levels"]] == [0, 1, 2, 3]
    assert_no_failures(summary)
    rows = stored_rows(db, summary["run_id"])
    assert len(rows) == sum(lv["requests_ok"] for lv in summary["levels"])
    # the server itself saw requests wait for a slot (so the queue was exercised)
    deferred = server_metric_max(db, summary["run_id"], "llamacpp:requests_deferred")
    assert deferred is not None and deferred > 0, "llama-server never queued a request"
    # its own per-request timings (prompt_ms) split the server side: prefill from them, per
    # level, named as such; llama.cpp reports no queue time per request
    report = json.loads((tmp_path / "report.json").read_text())
    by_level = report["server"]["levels"]
    last = str(len(levels) - 1)
    assert last in by_level, f"no server figures for level {last}: {summary['levels'][-1]}"
    busiest = by_level[last]
    assert str(busiest["sources"]["server_prefill_ms"]).startswith("per-request"), busiest
    assert busiest["server_prefill_ms"] > 0 and busiest["timed_requests"] > 0
    # the client held each level's concurrency: 8 in flight at the last level, 4 of them queued
    with psycopg.connect(db) as conn:
        peaks: dict[int, int] = dict(
            conn.execute(
                "SELECT level, max(in_flight) FROM ticks WHERE run_id = %s GROUP BY level",
                (summary["run_id"],),
            ).fetchall()
        )
    assert all(peaks.get(i, 0) >= c for i, c in enumerate(levels)), peaks
    # between_levels = "drain" (the default): no request of level N is in flight once level
    # N+1 has started (each one ended at or before that start, on the shard's one clock)
    assert summary["levels"][0]["between_levels"] == "drain"
    late = still_running_at_next_level(db, summary["run_id"])
    assert late == {}, f"requests of level N still in flight after level N+1 began: {late}"


def still_running_at_next_level(db_url: str, run_id: str) -> dict[int, int]:
    """Per level N, how many of its requests (stored rows) ended after level N+1's stored
    start, beyond the store's resolution (µs timestamps: 2 µs of rounding allowed)."""
    us = "(extract(epoch FROM {}) * 1e6)::bigint"
    with psycopg.connect(db_url) as conn:
        starts: dict[int, int | None] = dict(
            conn.execute(
                f"SELECT level, {us.format('started_at')} FROM run_levels WHERE run_id = %s",
                (run_id,),
            ).fetchall()
        )
        ends = conn.execute(
            f"SELECT level, {us.format('scheduled_at')} * 1000 + end_ns FROM requests "
            "WHERE run_id = %s AND end_ns IS NOT NULL",
            (run_id,),
        ).fetchall()
    assert len(starts) >= 2 and all(v is not None for v in starts.values()), starts
    late: Counter[int] = Counter()
    for level, end_ns in ends:
        nxt = starts.get(level + 1)
        if nxt is not None and end_ns > nxt * 1000 + 2000:
            late[level] += 1
    return dict(late)


def token_spans_ms(rows: list[dict[str, Any]]) -> tuple[list[float], list[int]]:
    """Per request, first to last token-carrying chunk (ms, the client's stamps) and the tokens:
    the interval and count the server's own decode time covers (llama.cpp's `predicted_ms`
    runs from its first generated token to its last; `predicted_n` counts them all)."""
    spans, tokens = [], []
    for r in rows:
        offs = [o for o, k in zip(r["chunk_offsets_us"], r["chunk_tokens"], strict=True) if k > 0]
        spans.append((offs[-1] - offs[0]) / 1e3)
        tokens.append(sum(r["chunk_tokens"]))
    return spans, tokens


@pytest.mark.parametrize("users", [1, SLOTS])
def test_client_ttft_and_itl_agree_with_the_servers_timings(
    llama: LlamaServer, users: int, db: str, tmp_path: Path
) -> None:
    """The server's time per token (from /metrics over the run) is a mean over its decode
    steps; the client's mean over the same spans (first to last token of each request) must
    match it. Not the client's ITL p50: the steps' spread (a new request's prefill riding in
    some of them, and the server's core shared with other work) puts a median gap below the
    mean by an amount that depends on the machine's load: 13 % at one stream on a loaded
    machine here while the means agreed within 1 %. The same requests on both sides: no probe,
    no preflight or prompt calibration (their tokens would count in the server's totals and in
    no record); the server's token count proves it."""
    load = f"concurrency = [{users}]\nduration_s = 8\nwarmup_s = 2"
    before = llama.metrics()
    text = spec_text(llama.base_url, llama.metrics_url, load, OUTPUT_TOKENS)
    summary = run(text, db, tmp_path, "--no-probe", "--no-preflight")
    after = llama.metrics()
    assert_no_failures(summary)
    rows = stored_rows(db, summary["run_id"])
    server_ms = server_ms_per_token(before, after)
    spans, tokens = token_spans_ms(rows)
    predicted = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert predicted == sum(tokens), (predicted, sum(tokens))
    client_ms = sum(spans) / sum(tokens)
    assert abs(client_ms - server_ms) <= ITL_TOLERANCE * server_ms, (
        f"client {client_ms:.2f} ms vs the server's {server_ms:.2f} ms per token"
    )
    # per request, where the store has the server's own timings: the client's TTFT holds the
    # server's prefill, and the two decode spans are one interval seen from both ends
    if rows and "server_decode_ms" in rows[0]:
        timed = [r for r in rows if r["server_decode_ms"] is not None]
        assert len(timed) == len(rows), f"{len(rows) - len(timed)} requests lack server timings"
        whole = 0
        for r, span in zip(rows, spans, strict=True):
            ttft_ms = (r["first_token_ns"] - r["sent_ns"]) / 1e6
            if r.get("server_prefill_ms") is not None:
                assert ttft_ms >= r["server_prefill_ms"] - 0.5, (ttft_ms, r["server_prefill_ms"])
            bound = ITL_TOLERANCE * r["server_decode_ms"]
            assert span <= r["server_decode_ms"] + bound, (span, r["server_decode_ms"])
            if one_delta_per_token(r):
                whole += 1
                assert span >= r["server_decode_ms"] - bound, (span, r["server_decode_ms"])
        assert whole >= 0.8 * len(rows), f"{whole} of {len(rows)} answers had a delta per token"


def one_delta_per_token(row: dict[str, Any]) -> bool:
    """The server sent each generated token in a delta of its own, so the client's first and
    last stamps are its first and last tokens. Not so where llama.cpp holds back a token
    that ends inside a UTF-8 character (SmolLM2 writes an emoji as 3-4 byte tokens; seen in 3
    of 196 answers here): a first delta of k tokens arrives when the k-th is generated, and
    its first k - 1 decode steps (one of them may carry another slot's prefill: 250 ms on one
    core) are the server's alone. Such a request's client span can only be shorter."""
    return bool(row["client_tokens"] == row["usage_completion_tokens"])


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_a_gateway_closing_after_every_response_fails_no_request(
    llama: LlamaServer, llama_close_proxy: HttpProxy, transport: str, db: str, tmp_path: Path
) -> None:
    p = llama_close_proxy
    load = "concurrency = [2]\nduration_s = 3\nwarmup_s = 1"  # tens of requests, each its own
    summary = run(
        spec_text(p.url + "/v1", llama.metrics_url, load, transport=transport), db, tmp_path
    )
    assert_no_failures(summary)
    rows = stored_rows(db, summary["run_id"])
    assert_sent_once_on_the_wire(p, rows)
    assert p.closed_after_response == p.requests  # each on its own connection
    assert p.upstream_failures == 0
    if p.announce_close:  # told, the client never tries a closed connection
        assert resent_total(rows) == 0
    if "connect_ns" in rows[0]:  # requests after the first open their connection: set-up kept
        assert any(r["connect_ns"] is not None and r["connect_ns"] > 0 for r in rows)


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_an_idle_timeout_shorter_than_the_think_time_fails_no_request(
    llama: LlamaServer, llama_idle_proxy: HttpProxy, transport: str, db: str, tmp_path: Path
) -> None:
    p = llama_idle_proxy
    assert p.idle_timeout_s is not None and p.idle_timeout_s < 1.0
    load = "concurrency = [2]\nduration_s = 5\nwarmup_s = 1\nthink_time_s = 1.0"
    summary = run(
        spec_text(p.url + "/v1", llama.metrics_url, load, transport=transport), db, tmp_path
    )
    assert_no_failures(summary)
    rows = stored_rows(db, summary["run_id"])
    assert_sent_once_on_the_wire(p, rows)
    assert p.closed_idle > 0, "the gateway never closed an idle connection"
    assert p.upstream_failures == 0
