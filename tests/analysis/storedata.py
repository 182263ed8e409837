"""Synthetic stored runs for the analysis tests: build runs / run_levels / requests / ticks rows
as plain dicts (or a DataFrame shaped like analysis.store.load.load_requests) and insert them with
plain SQL and COPY into a real store. Offsets follow deploy/sql/0001_core.sql."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from loadgen.results.storeformat import NULLABLE_INT_COLUMNS, NULLABLE_REAL_COLUMNS

T0 = dt.datetime(2026, 11, 1, 12, 0, 0, tzinfo=dt.UTC)
MS = 1_000_000  # ns per ms


def request_row(run_id: str, i: int, **over: Any) -> dict[str, Any]:
    """One requests row; defaults: ok, steady, level 0, region 'local', sent at scheduled time."""
    row: dict[str, Any] = {
        "request_id": str(uuid.uuid5(uuid.NAMESPACE_OID, f"{run_id}/{i}")),
        "scheduled_at": T0 + dt.timedelta(milliseconds=100 * i),
        "run_id": run_id,
        "shard_id": "s0",
        "region": "local",
        "level": 0,
        "idx": i,
        "phase": "steady",
        "attempt": 0,
        "session_id": None,
        "turn": None,
        "outcome": "ok",
        "http_status": None,
        "error_phase": None,
        "error_detail": None,
        "sent_ns": 0,
        "headers_ns": None,
        "first_token_ns": None,
        "first_answer_ns": None,
        "end_ns": None,
        "prompt_tokens": 100,
        "max_tokens": 200,
        "output_tokens": 0,
        "reasoning_tokens": 0,
        "usage_prompt_tokens": None,
        "usage_completion_tokens": None,
        "client_tokens": 0,
        "token_source": "client",
        "chunk_offsets_us": [],
        "chunk_tokens": [],
        "retry_after_s": None,
        "prompt_text": None,
        "response_text": None,
        "connect_ns": None,
        "resent": 0,
        "server_prompt_tokens": None,
        "server_prefill_ms": None,
        "server_decode_tokens": None,
        "server_decode_ms": None,
        "server_cached_tokens": None,
        "server_queue_ms": None,
        "chunk_choices": None,
        "adapter": None,
        "shared_prefix_tokens": None,
    }
    # the audio columns (deploy/sql/0210) only where a test gives them: speech runs
    unknown = set(over) - set(row) - {"audio_ms", "audio_bytes", "transcript_words"}
    if unknown:
        raise KeyError(f"unknown request columns: {sorted(unknown)}")
    row.update(over)
    return row


def streamed(
    run_id: str,
    i: int,
    *,
    sent_ns: int,
    offsets_us: Sequence[int],
    tokens: Sequence[int],
    end_after_us: int | None = None,
    **over: Any,
) -> dict[str, Any]:
    """An ok streamed request: first_token/first_answer at the first token-carrying chunk,
    end at the last chunk (or `end_after_us` from send), output/client tokens from the chunks."""
    first = next(o for o, k in zip(offsets_us, tokens, strict=True) if k > 0)
    end_us = end_after_us if end_after_us is not None else offsets_us[-1]
    base: dict[str, Any] = {
        "sent_ns": sent_ns,
        "headers_ns": sent_ns + 1000 * offsets_us[0] // 2,
        "first_token_ns": sent_ns + 1000 * first,
        "first_answer_ns": sent_ns + 1000 * first,
        "end_ns": sent_ns + 1000 * end_us,
        "output_tokens": int(sum(tokens)),
        "client_tokens": int(sum(tokens)),
        "chunk_offsets_us": list(offsets_us),
        "chunk_tokens": list(tokens),
    }
    base.update(over)
    return request_row(run_id, i, **base)


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows shaped like `analysis.store.load.load_requests` returns them (without a store)."""
    df = pd.DataFrame(list(rows))
    df["scheduled_at"] = pd.to_datetime(df["scheduled_at"], utc=True)
    for c in (*NULLABLE_INT_COLUMNS, *NULLABLE_REAL_COLUMNS):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    df["chunk_offsets_us"] = [np.asarray(a, dtype=np.int64) for a in df["chunk_offsets_us"]]
    df["chunk_tokens"] = [np.asarray(a, dtype=np.int64) for a in df["chunk_tokens"]]
    df["n_chunks"] = [a.size for a in df["chunk_offsets_us"]]
    return df.drop(columns=["prompt_text", "response_text"])


def run_row(run_id: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id,
        "name": "synthetic",
        "mode": "local",
        "status": "completed",
        "valid": True,
        "invalid_reasons": [],
        "status_reason": None,
        "api": "openai-chat",
        "target_url": "http://127.0.0.1:9/v1",
        "model": "sim-1",
        "labels": {"engine": "sim", "hardware": "cpu"},
        "spec": {"name": "synthetic", "slos": []},
        "schedule_name": None,
        "store_content": False,
        "created_at": T0,
        "started_at": T0,
        "ended_at": T0 + dt.timedelta(seconds=60),
        "requests_scheduled": 0,
    }
    row.update(over)
    return row


def level_row(run_id: str, level: int = 0, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id,
        "level": level,
        "kind": "rate",
        "value": 10.0,
        "duration_s": 10.0,
        "warmup_s": 0.0,
        "cooldown_s": 0.0,
        "started_at": T0,
        "ended_at": None,
    }
    row.update(over)
    return row


def tick_row(run_id: str, second: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "t": T0 + dt.timedelta(seconds=second),
        "run_id": run_id,
        "shard_id": "s0",
        "region": "local",
        "level": 0,
        "in_flight": 0,
        "started": 0,
        "completed": 0,
        "errors": 0,
        "output_tokens": 0,
        "loop_lag_ms_max": 0.1,
        "loop_lag_ms_p99": 0.1,
        "dispatch_delay_ms_max": 0.1,
        "cpu_percent": 10.0,
        "rss_bytes": 50_000_000,
    }
    row.update(over)
    return row


_JSON = {"invalid_reasons", "labels", "spec"}


def _insert(conn: psycopg.Connection[Any], table: str, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    stmt = psycopg.sql.SQL("COPY {} ({}) FROM STDIN").format(
        psycopg.sql.Identifier(table), psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, cols))
    )
    with conn.cursor() as cur, cur.copy(stmt) as cp:
        for r in rows:
            cp.write_row([json.dumps(r[c]) if c in _JSON else r[c] for c in cols])


def insert_run(
    conn: psycopg.Connection[Any],
    run: dict[str, Any],
    levels: Sequence[dict[str, Any]] = (),
    requests: Sequence[dict[str, Any]] = (),
    ticks: Sequence[dict[str, Any]] = (),
    shards: Sequence[dict[str, Any]] = (),
) -> None:
    """Insert one run and its rows with COPY, in one transaction."""
    with conn.transaction():
        _insert(conn, "runs", [run])
        _insert(conn, "run_levels", levels)
        _insert(conn, "shards", shards)
        _insert(conn, "requests", requests)
        _insert(conn, "ticks", ticks)


def synthetic_run(
    run_id: str,
    *,
    levels: Sequence[tuple[str, float]] = (("rate", 10.0),),
    regions: Sequence[str] = ("local",),
    per_level: int = 60,
    duration_s: float = 10.0,
    fail_every: int = 0,
    reasoning: bool = False,
    seed: int = 0,
    run_over: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """A whole run (run, levels, requests, ticks), seeded. Latency grows with the level; every
    `fail_every`-th request is a 503 (or a stream error keeping 3 tokens); reasoning runs have
    a first answer token 200 ms after the first (reasoning) token."""
    rng = np.random.default_rng(seed)
    run = run_row(run_id, **(run_over or {}))
    lv_rows, reqs, ticks = [], [], []
    i = 0
    for lvl, (kind, value) in enumerate(levels):
        lv_rows.append(
            level_row(
                run_id,
                lvl,
                kind=kind,
                value=value,
                duration_s=duration_s,
                started_at=T0 + dt.timedelta(seconds=lvl * duration_s),
            )
        )
        for j in range(per_level):
            region = regions[j % len(regions)]
            sched = T0 + dt.timedelta(seconds=lvl * duration_s + j * duration_s / per_level)
            over = {
                "scheduled_at": sched,
                "level": lvl,
                "region": region,
                "shard_id": f"{region}-0",
                "prompt_text": "CANARY-PROMPT-9c1d",
                "response_text": "CANARY-RESPONSE-9c1d",
            }
            if fail_every and j % fail_every == fail_every - 1:
                if j % 2:
                    reqs.append(
                        request_row(
                            run_id, i, outcome="http_error", http_status=503, end_ns=3 * MS, **over
                        )
                    )
                else:
                    reqs.append(
                        streamed(
                            run_id,
                            i,
                            sent_ns=0,
                            offsets_us=[50_000, 60_000, 70_000],
                            tokens=[1, 1, 1],
                            outcome="stream_error",
                            error_detail="reset",
                            **over,
                        )
                    )
                i += 1
                continue
            ttft_us = int(rng.gamma(4.0, 10_000 * (1 + lvl)))
            n_chunks = int(rng.integers(3, 12))
            gaps = rng.gamma(2.0, 5_000 * (1 + lvl), n_chunks - 1).astype(int) + 1
            offs = np.r_[ttft_us, ttft_us + np.cumsum(gaps)].tolist()
            toks = rng.integers(1, 3, n_chunks).tolist()
            sent = int(rng.integers(0, 500_000))
            extra = {"first_answer_ns": sent + 1000 * (ttft_us + 200_000)} if reasoning else {}
            if reasoning:
                offs = [o + (200_000 if k > 0 else 0) for k, o in enumerate(offs)]
                extra["reasoning_tokens"] = int(toks[0])
            reqs.append(
                streamed(
                    run_id,
                    i,
                    sent_ns=sent,
                    offsets_us=offs,
                    tokens=toks,
                    usage_completion_tokens=int(sum(toks)),
                    **extra,
                    **over,
                )
            )
            i += 1
        for s in range(int(duration_s)):
            for region in regions:
                ticks.append(
                    tick_row(
                        run_id,
                        int(lvl * duration_s) + s,
                        region=region,
                        shard_id=f"{region}-0",
                        level=lvl,
                        in_flight=int(value) // len(regions),
                        completed=5,
                        output_tokens=40,
                        errors=int(fail_every > 0),
                    )
                )
    run["requests_scheduled"] = len(reqs)
    run["ended_at"] = T0 + dt.timedelta(seconds=len(levels) * duration_s)
    return run, lv_rows, reqs, ticks


def timed_requests(run_id: str) -> list[dict[str, Any]]:
    """Requests of three levels (0: a server reporting its timings to some of them, with new
    connections and a re-send, two regions; 1: no timings, connections reused; 2: rows as
    stored before deploy/sql/0120, nothing on record): tests/analysis/test_timings_summary.py
    works out its numbers by hand."""

    def server(prefill: float, queue: float | None, n: int, decode: float) -> dict[str, Any]:
        return {
            "server_prompt_tokens": 64,
            "server_prefill_ms": prefill,
            "server_queue_ms": queue,
            "server_decode_tokens": n,
            "server_decode_ms": decode,
        }

    return [
        # level 0: TTFT 100 ms, ITL 20 x3; a new connection (2 ms); server 80 + 5 queue, and
        # 54 ms from its first to its 4th token: ITL 18
        streamed(run_id, 0, sent_ns=0, offsets_us=[100_000, 120_000, 140_000, 160_000],
                 tokens=[1, 1, 1, 1], region="eu", connect_ns=2 * MS,
                 **server(80.0, 5.0, 4, 54.0)),
        # TTFT 200, ITL 30 x2; reused, re-sent once; server 150 (no queue), 56/2 = 28
        streamed(run_id, 1, sent_ns=0, offsets_us=[200_000, 230_000, 260_000],
                 tokens=[1, 1, 1], region="eu", resent=1, **server(150.0, None, 3, 56.0)),
        # TTFT 300, ITL 10 x2; new connection (4 ms); server 250 + 10 queue, 16/2 = 8
        streamed(run_id, 2, sent_ns=0, offsets_us=[300_000, 310_000, 320_000],
                 tokens=[1, 1, 1], region="us", connect_ns=4 * MS,
                 **server(250.0, 10.0, 3, 16.0)),
        # TTFT 400, ITL 60 x4; the server reported nothing for this one
        streamed(run_id, 3, sent_ns=0, offsets_us=[400_000, 460_000, 520_000, 580_000, 640_000],
                 tokens=[1, 1, 1, 1, 1], region="us"),
        # failed, on a new connection (6 ms): counts for connections, not for latencies
        request_row(run_id, 4, outcome="http_error", http_status=503, end_ns=9 * MS,
                    region="eu", connect_ns=6 * MS),
        # level 1: no server timings, every connection reused
        streamed(run_id, 5, sent_ns=0, offsets_us=[50_000, 60_000], tokens=[1, 1], level=1,
                 region="eu"),
        streamed(run_id, 6, sent_ns=0, offsets_us=[50_000, 70_000], tokens=[1, 1], level=1,
                 region="us"),
        # level 2: rows as stored before deploy/sql/0120 (nothing on record)
        streamed(run_id, 7, sent_ns=0, offsets_us=[50_000, 60_000], tokens=[1, 1], level=2,
                 region="eu", resent=None),
    ]  # fmt: skip
