"""Reading the store (schema: deploy/sql/) into pandas: runs, levels, shards, requests and ticks
(bucketed time series: analysis.store.buckets).

Units as stored: request offsets `*_ns` are ns on the measuring host's monotonic clock from the
request's scheduled time (float64 here, NaN when the event never happened: exact below 104 days);
`chunk_offsets_us` are µs from send. Timestamps are UTC `datetime64[ns, UTC]`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from analysis.store.connect import connect_reader
from loadgen.results.storeformat import (
    AUDIO_COLUMNS,
    CONTENT_COLUMNS,
    DATABASE_ENV,
    NULLABLE_INT_COLUMNS,
    NULLABLE_REAL_COLUMNS,
    READ_COLUMNS,
)

DATABASE_URL_ENV = DATABASE_ENV
REQUEST_COLUMNS = READ_COLUMNS  # what a frame of requests has, in the store's order
# float64, NaN for NULL (the audio columns too: deploy/sql/0210)
_FLOAT_COLUMNS = (*NULLABLE_INT_COLUMNS, *NULLABLE_REAL_COLUMNS, *AUDIO_COLUMNS)


def open_store(conninfo: str | None = None) -> psycopg.Connection[Any]:
    """Connect to the store: `conninfo`, else the `PEAKLOAD_DATABASE_URL` environment variable."""
    url = conninfo or os.environ.get(DATABASE_URL_ENV)
    if not url:
        raise ValueError(f"no store given: pass a connection URL or set {DATABASE_URL_ENV}")
    return connect_reader(url)


def _ids(run_ids: str | Iterable[str]) -> list[str]:
    return [run_ids] if isinstance(run_ids, str) else [str(r) for r in run_ids]


def _frame(cur: psycopg.Cursor[Any]) -> pd.DataFrame:
    rows = cur.fetchall()
    names = [d.name for d in cur.description or ()]
    return pd.DataFrame.from_records(rows, columns=names)


def _where(clauses: Sequence[sql.Composable]) -> sql.Composable:
    """WHERE and the clauses joined by AND; nothing without clauses."""
    return sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")


def _limit(limit: int | None) -> sql.Composable:
    return sql.SQL("LIMIT {}").format(sql.Literal(int(limit))) if limit else sql.SQL("")


def _utc(series: pd.Series) -> pd.Series:
    return pd.to_datetime(series, utc=True)


# ---------------------------------------------------------------- runs, levels, shards


def load_runs(
    conn: psycopg.Connection[Any],
    *,
    run_ids: Sequence[str] | None = None,
    name_like: str | None = None,
    status: str | None = None,
    schedule_name: str | None = None,
    target_like: str | None = None,
    model: str | None = None,
    labels: dict[str, Any] | None = None,
    launched_by: str | None = None,
    preset: str | None = None,
    tag: str | None = None,
    limit: int | None = 100,
) -> pd.DataFrame:
    """One row per run, newest first: id, name, target, model, labels, start, duration (s),
    status, validity, requests (recorded), errors (not ok), plus the stored spec and reasons, a
    saturation search's answer (`search`, JSON; None for other runs), who launched it
    (`launched_by`), its target preset (`preset`, None without one) and `tags` (a list).
    `launched_by`, `preset` and `tag` filter exactly."""
    where: list[sql.Composable] = []
    params: list[Any] = []
    if run_ids is not None:
        where.append(sql.SQL("r.run_id = ANY(%s::uuid[])"))
        params.append(list(run_ids))
    for col, val, op in (
        ("name", name_like, "ILIKE"),
        ("status", status, "="),
        ("schedule_name", schedule_name, "="),
        ("target_url", target_like, "ILIKE"),
        ("model", model, "="),
    ):
        if val is not None:
            where.append(sql.SQL("r.{} {} %s").format(sql.Identifier(col), sql.SQL(op)))
            params.append(f"%{literal_like(val)}%" if op == "ILIKE" else val)
    if labels:
        where.append(sql.SQL("r.labels @> %s::jsonb"))
        params.append(Jsonb(labels))
    if launched_by is not None:
        where.append(sql.SQL("r.launched_by = %s"))
        params.append(launched_by)
    if preset is not None:
        where.append(sql.SQL("r.spec->'target'->>'preset' = %s"))
        params.append(preset)
    if tag is not None:
        where.append(
            sql.SQL("EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = r.run_id AND t.tag = %s)")
        )
        params.append(tag)
    # Two counts, each answered from an index (requests_run_idx; requests_errors_idx, partial,
    # deploy/sql/0111) without reading the rows, where the visibility map allows: counting
    # both in one pass over `requests` read every row of every run listed (seconds per call).
    query = sql.SQL(
        """
        SELECT r.run_id::text AS run_id, r.name, r.mode, r.status, r.valid, r.invalid_reasons,
               r.status_reason, r.api, r.target_url, r.model, r.labels, r.spec, r.schedule_name,
               r.created_at, r.started_at, r.ended_at, r.search, r.launched_by,
               r.spec->'target'->>'preset' AS preset,
               ARRAY(SELECT t.tag FROM run_tags t WHERE t.run_id = r.run_id ORDER BY t.tag)
                   AS tags,
               EXTRACT(EPOCH FROM (r.ended_at - r.started_at))::float8 AS duration_s,
               r.requests_scheduled,
               (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) AS requests,
               (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.outcome <> 'ok')
                   AS errors
        FROM runs r
        {where}
        ORDER BY r.created_at DESC, r.run_id
        {limit}
        """
    ).format(
        where=_where(where),
        limit=_limit(limit),
    )
    # The planner prices the two counts per listed run (rows x the limit) far above the JIT
    # thresholds and compiles the query for ~0.4 s; it runs in ~50 ms for 200 runs without.
    # SET LOCAL: for this transaction only, so it holds through a transaction-mode pooler.
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SET LOCAL jit = off")
        cur.execute(query, params)
        df = _frame(cur)
    if df.empty:
        df = pd.DataFrame(columns=[*df.columns])
    for col in ("created_at", "started_at", "ended_at"):
        df[col] = _utc(df[col])
    for col in ("requests", "errors"):
        df[col] = df[col].astype("int64")
    for col in ("launched_by", "preset"):  # None, not NaN, where absent: `if row[col]` works
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    return df


def load_run_labels(
    conn: psycopg.Connection[Any],
    *,
    run_ids: Sequence[str] | None = None,
    status: str | None = None,
    limit: int | None = 100,
) -> pd.DataFrame:
    """run_id, name and started_at per run (of these ids, of this status), newest first: what
    a picker shows, without `load_runs`' two counts per run (an index scan of each run's
    requests: 25 ms per run of 100k, so 5 s for a picker of 200 such runs)."""
    where: list[sql.Composable] = []
    params: list[Any] = []
    if run_ids is not None:
        where.append(sql.SQL("run_id = ANY(%s::uuid[])"))
        params.append(list(run_ids))
    if status is not None:
        where.append(sql.SQL("status = %s"))
        params.append(status)
    query = sql.SQL(
        "SELECT run_id::text AS run_id, name, started_at FROM runs {where} "
        "ORDER BY created_at DESC, run_id {limit}"
    ).format(
        where=_where(where),
        limit=_limit(limit),
    )
    with conn.cursor() as cur:
        cur.execute(query, params)
        df = _frame(cur)
    if df.empty:
        df = pd.DataFrame(columns=["run_id", "name", "started_at"])
    df["started_at"] = _utc(df["started_at"])
    return df


def load_run(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    """One run as a dict (see `load_runs`); raises LookupError naming the id if absent."""
    df = load_runs(conn, run_ids=[run_id], limit=None)
    if df.empty:
        raise LookupError(f"run {run_id} not found in the store")
    return {str(k): v for k, v in df.iloc[0].to_dict().items()}


def literal_like(text: str) -> str:
    """`text` for a LIKE pattern, matched literally: `%`, `_` and the escape `\\` escaped."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def load_levels(conn: psycopg.Connection[Any], run_ids: str | Iterable[str]) -> pd.DataFrame:
    """One row per (run, level): kind, configured value, duration/warmup/cooldown (s), times,
    the steady window as run (steady_start/steady_end), drained_at, between_levels and the
    saturation search's decision (`search`, JSON) where stored."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT run_id::text AS run_id, level, kind, value, duration_s, warmup_s, cooldown_s, "
            "started_at, ended_at, steady_start, steady_end, drained_at, between_levels, search "
            "FROM run_levels WHERE run_id = ANY(%s::uuid[]) "
            "ORDER BY run_id, level",
            (_ids(run_ids),),
        )
        df = _frame(cur)
    if df.empty:
        df = pd.DataFrame(
            columns=[
                "run_id",
                "level",
                "kind",
                "value",
                "duration_s",
                "warmup_s",
                "cooldown_s",
                "started_at",
                "ended_at",
                "steady_start",
                "steady_end",
                "drained_at",
                "between_levels",
                "search",
            ]
        )
    for col in ("started_at", "ended_at", "steady_start", "steady_end", "drained_at"):
        df[col] = _utc(df[col])
    return df


def load_shards(conn: psycopg.Connection[Any], run_ids: str | Iterable[str]) -> pd.DataFrame:
    """One row per shard: region, state, host, clock offset/uncertainty (ns), counts, validity."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT run_id::text AS run_id, shard_id, region, slot, state, state_reason, host, "
            "clock_offset_ns, clock_uncertainty_ns, start_skew_ns, started_at, ended_at, "
            "requests_scheduled, records_written, valid, invalid_reasons "
            "FROM shards WHERE run_id = ANY(%s::uuid[]) ORDER BY run_id, region, shard_id",
            (_ids(run_ids),),
        )
        return _frame(cur)


# ---------------------------------------------------------------- requests and ticks


def load_requests(
    conn: psycopg.Connection[Any],
    run_ids: str | Iterable[str],
    *,
    include_content: bool = False,
    arrays: bool = True,
) -> pd.DataFrame:
    """One row per request of the given runs, ordered by scheduled time then id.

    `*_ns` columns are float64 ns from the scheduled time (NaN = never happened), except
    `connect_ns`, a duration (NaN: a reused connection); nullable integers are float64 with
    NaN. `server_*` are the server's own counts and ms, NaN where it reported none.
    `chunk_offsets_us` (int64 µs from send) and `chunk_tokens` (int64) hold one numpy array per
    row, `chunk_choices` per row its chunks' choices of `n > 1` or None
    (loadgen/results/choices.py); `arrays=False` leaves them out (with `n_chunks` kept). Content
    columns only with `include_content=True`.
    """
    cols: list[sql.Composable] = [
        sql.SQL("request_id::text AS request_id"),
        sql.SQL("run_id::text AS run_id"),
    ]
    for c in REQUEST_COLUMNS:
        if c in ("request_id", "run_id"):
            continue
        if c in ("chunk_offsets_us", "chunk_tokens", "chunk_choices") and not arrays:
            continue
        cols.append(sql.Identifier(c))
    cols.append(sql.SQL("cardinality(chunk_offsets_us) AS n_chunks"))
    if include_content:
        cols.extend(sql.Identifier(c) for c in CONTENT_COLUMNS)
    query = sql.SQL(
        "SELECT {} FROM requests WHERE run_id = ANY(%s::uuid[]) ORDER BY scheduled_at, request_id"
    ).format(sql.SQL(", ").join(cols))
    with conn.cursor(binary=True) as cur:
        cur.execute(query, (_ids(run_ids),))
        rows = cur.fetchall()
        names = [d.name for d in cur.description or ()]
    df = pd.DataFrame.from_records(rows, columns=names)
    df["scheduled_at"] = _utc(df["scheduled_at"])
    for c in _FLOAT_COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in (
        "level",
        "idx",
        "attempt",
        "output_tokens",
        "reasoning_tokens",
        "client_tokens",
        "n_chunks",
    ):
        df[c] = df[c].astype("int64")
    if arrays:
        for c in ("chunk_offsets_us", "chunk_tokens"):
            df[c] = pd.Series([np.asarray(a, dtype=np.int64) for a in df[c]], dtype=object)
        # deploy/sql/0190: per chunk its choice (n > 1), None when all are choice 0
        df["chunk_choices"] = pd.Series(
            [None if a is None else np.asarray(a, dtype=np.int64) for a in df["chunk_choices"]],
            dtype=object,
        )
    return df


def load_ticks(conn: psycopg.Connection[Any], run_ids: str | Iterable[str]) -> pd.DataFrame:
    """One row per shard per second: progress counts and the generator's health (lags in ms)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT t, run_id::text AS run_id, shard_id, region, level, in_flight, started, "
            "completed, errors, output_tokens, loop_lag_ms_max, loop_lag_ms_p99, "
            "dispatch_delay_ms_max, cpu_percent, rss_bytes FROM ticks "
            "WHERE run_id = ANY(%s::uuid[]) ORDER BY t, shard_id",
            (_ids(run_ids),),
        )
        df = _frame(cur)
    if df.empty:
        df = pd.DataFrame(
            columns=[
                "t",
                "run_id",
                "shard_id",
                "region",
                "level",
                "in_flight",
                "started",
                "completed",
                "errors",
                "output_tokens",
                "loop_lag_ms_max",
                "loop_lag_ms_p99",
                "dispatch_delay_ms_max",
                "cpu_percent",
                "rss_bytes",
            ]
        )
    df["t"] = _utc(df["t"])
    return df
