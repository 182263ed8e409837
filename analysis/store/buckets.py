"""A run's time series from the store: ticks and requests counted per time bucket (and region),
bucketed by `time_bucket` on TimescaleDB and `date_bin` on plain PostgreSQL, with identical
buckets aligned to the Unix epoch.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

BucketFn = Literal["time_bucket", "date_bin"]


def has_timescaledb(conn: psycopg.Connection[Any]) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")
        return cur.fetchone() is not None


def bucket_function(conn: psycopg.Connection[Any]) -> BucketFn:
    """`time_bucket` where the timescaledb extension is installed, `date_bin` otherwise."""
    return "time_bucket" if has_timescaledb(conn) else "date_bin"


_ORIGIN = "1970-01-01 00:00:00+00"  # the same origin for both functions: identical buckets
TIMESERIES_COLUMNS = (
    "bucket",
    "region",
    "in_flight",
    "output_tokens_per_s",
    "started_per_s",
    "completed_per_s",
    "errors_per_s",
    "ok_per_s",
    "failed_per_s",
)


def timeseries(
    conn: psycopg.Connection[Any],
    run_id: str,
    bucket_s: float = 1.0,
    *,
    by: Literal["region", "none"] = "region",
    bucket_fn: BucketFn | None = None,
    requests: bool = True,
) -> pd.DataFrame:
    """Per time bucket (and region): from ticks, mean in-flight (summed over shards per tick
    second, averaged over the bucket), tokens/s, started/s, completed/s, errors/s; from requests
    (bucketed by completion time = scheduled_at + end_ns, as metrics.request_rate counts them),
    ok/s and failed/s. The tokens/s here are the shards' live count; charts of a stored run
    count them as the tables do: analysis.stats.throughput.with_arrival_throughput, which
    counts ok/s and failed/s from the run's frame too: `requests=False` leaves them 0 here
    and the store's pass over the requests out (80 ms of 100k).

    Ticks are per-second deltas except `in_flight` (a gauge). `bucket` is the bucket's start
    (UTC), buckets aligned to the Unix epoch; identical under `time_bucket` and `date_bin`.
    """
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive (got {bucket_s})")
    fn = bucket_fn or bucket_function(conn)
    width = sql.SQL("make_interval(secs => %(w)s)")
    grp = sql.SQL("region") if by == "region" else sql.SQL("'all'::text")

    def bucket(ts: sql.Composable) -> sql.Composable:
        return sql.SQL("{fn}({w}, {ts}, %(origin)s::timestamptz)").format(
            fn=sql.Identifier(fn), w=width, ts=ts
        )

    # one query, the two sides joined in the store; buckets as integer microseconds since the
    # epoch (exact), not timestamptz: 6,000 datetimes made into Python objects and merged on
    # took 90 of the 200 ms this took for a 2,000-s run
    query = sql.SQL(
        """
        WITH per_second AS (
            SELECT t, {grp} AS region, sum(in_flight) AS in_flight, sum(started) AS started,
                   sum(completed) AS completed, sum(errors) AS errors,
                   sum(output_tokens) AS output_tokens
            FROM ticks WHERE run_id = %(run)s::uuid GROUP BY t, 2
        ), tick_side AS (
            SELECT {tb} AS bucket, region, avg(in_flight)::float8 AS in_flight,
                   (sum(output_tokens) / %(w)s)::float8 AS output_tokens_per_s,
                   (sum(started) / %(w)s)::float8 AS started_per_s,
                   (sum(completed) / %(w)s)::float8 AS completed_per_s,
                   (sum(errors) / %(w)s)::float8 AS errors_per_s
            FROM per_second GROUP BY 1, 2
        ), request_side AS (
            SELECT {rb} AS bucket, {grp} AS region,
                   (count(*) FILTER (WHERE outcome = 'ok') / %(w)s)::float8 AS ok_per_s,
                   (count(*) FILTER (WHERE outcome <> 'ok') / %(w)s)::float8 AS failed_per_s
            FROM requests WHERE run_id = %(run)s::uuid AND %(requests)s GROUP BY 1, 2
        )
        SELECT (extract(epoch FROM bucket) * 1000000)::int8 AS bucket_us, region, in_flight,
               output_tokens_per_s, started_per_s, completed_per_s, errors_per_s,
               COALESCE(ok_per_s, 0)::float8 AS ok_per_s,
               COALESCE(failed_per_s, 0)::float8 AS failed_per_s
        FROM tick_side FULL JOIN request_side USING (bucket, region)
        ORDER BY bucket, region COLLATE "C"
        """
    ).format(
        grp=grp,
        tb=bucket(sql.SQL("t")),
        rb=bucket(
            sql.SQL("scheduled_at + make_interval(secs => COALESCE(end_ns, 0) / 1e9::float8)")
        ),
    )
    params = {"run": run_id, "w": float(bucket_s), "origin": _ORIGIN, "requests": requests}
    with conn.cursor() as cur:
        cur.execute(query, params)
        rows = cur.fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(TIMESERIES_COLUMNS)
    return pd.DataFrame(
        {
            "bucket": pd.to_datetime(np.asarray(columns[0], dtype=np.int64), unit="us", utc=True),
            "region": pd.Series(columns[1], dtype="str"),
            **{
                name: np.asarray(col, dtype=np.float64)  # a bucket one side lacks: NaN
                for name, col in zip(TIMESERIES_COLUMNS[2:], columns[2:], strict=True)
            },
        }
    )
