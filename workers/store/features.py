"""What the store's server offers, and switching on the optional TimescaleDB features where its
license allows: compression, retention (only when configured) and a per-minute continuous
aggregate over ticks. Every attempt that cannot be made is reported with its reason, never raised.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from loadgen.errors import StoreError

COMPRESS_AFTER = "7 days"  # chunks older than this are compressed (full license only)
RETENTION_ENV = "PEAKLOAD_RETENTION_DAYS"  # unset: measurements are kept forever (the default)
CAGG_NAME = "ticks_1m"

# Compression layout per hypertable: segment by the run so one run's rows stay together.
_COMPRESS = {
    "requests": ("ALTER TABLE requests SET (timescaledb.compress, "
                 "timescaledb.compress_segmentby = 'run_id', "
                 "timescaledb.compress_orderby = 'scheduled_at')"),
    "ticks": ("ALTER TABLE ticks SET (timescaledb.compress, "
              "timescaledb.compress_segmentby = 'run_id, shard_id', "
              "timescaledb.compress_orderby = 't')"),
}  # fmt: skip

# Ticks are per-second counts (loadgen.results.records.Tick), so a minute sums them.
_CAGG = sql.SQL("""CREATE MATERIALIZED VIEW IF NOT EXISTS {}
WITH (timescaledb.continuous) AS
SELECT time_bucket(INTERVAL '1 minute', t) AS bucket, run_id, shard_id, region,
       count(*) AS ticks, max(in_flight) AS in_flight_max, sum(started) AS started,
       sum(completed) AS completed, sum(errors) AS errors, sum(output_tokens) AS output_tokens,
       max(loop_lag_ms_max) AS loop_lag_ms_max, max(dispatch_delay_ms_max)
       AS dispatch_delay_ms_max, avg(cpu_percent) AS cpu_percent_avg,
       max(rss_bytes) AS rss_bytes_max
FROM ticks GROUP BY bucket, run_id, shard_id, region WITH NO DATA""").format(
    sql.Identifier(CAGG_NAME)
)


@dataclass(frozen=True, slots=True)
class Feature:
    """One optional capability: on or off, and why."""

    on: bool
    reason: str


@dataclass(slots=True)
class StoreFeatures:
    """What a store offers, as detected (and switched on where allowed) at connect time."""

    server_version: str
    server_version_num: int
    timescaledb_version: str | None
    license: str | None  # `SHOW timescaledb.license`: apache | timescale | None
    hypertables: list[str] = field(default_factory=list)
    features: dict[str, Feature] = field(default_factory=dict)
    migrations: list[dict[str, Any]] = field(default_factory=list)
    pending_migrations: list[str] = field(default_factory=list)

    @property
    def timescale(self) -> bool:
        return self.timescaledb_version is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def retention_days_from_env() -> int | None:
    """PEAKLOAD_RETENTION_DAYS as a positive integer, or None when unset/empty."""
    raw = os.environ.get(RETENTION_ENV, "").strip()
    if not raw:
        return None
    try:
        days = int(raw)
    except ValueError:
        raise StoreError(f"{RETENTION_ENV}={raw!r}: must be a whole number of days") from None
    if days <= 0:
        raise StoreError(f"{RETENTION_ENV}={raw!r}: must be at least 1 day")
    return days


def _one(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query.encode(), params).fetchone()
    return None if row is None else row[0]


def _jobs(conn: psycopg.Connection[Any], proc: str) -> set[str]:
    rows = conn.execute(
        "SELECT coalesce(hypertable_name, '') FROM timescaledb_information.jobs "
        "WHERE proc_name = %s",
        (proc,),
    ).fetchall()
    return {str(r[0]) for r in rows}


def detect(conn: psycopg.Connection[Any], retention_days: int | None = None) -> StoreFeatures:
    """Read what the server offers and what is switched on. Connection must be in autocommit."""
    f = StoreFeatures(
        server_version=str(_one(conn, "SHOW server_version")),
        server_version_num=int(_one(conn, "SHOW server_version_num")),
        timescaledb_version=_one(
            conn, "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"
        ),
        license=None,
    )
    if not f.timescale:
        available = _one(
            conn, "SELECT count(*) FROM pg_available_extensions WHERE name = 'timescaledb'"
        )
        why = (
            "timescaledb is installed on the server but not loadable in this database "
            "(shared_preload_libraries?)"
            if available
            else "timescaledb is not installed on this server (plain PostgreSQL)"
        )
        f.features["timescaledb"] = Feature(False, why)
        for name in ("hypertables", "compression", "retention", "continuous_aggregates"):
            f.features[name] = Feature(False, why)
        return f
    f.license = str(_one(conn, "SHOW timescaledb.license"))
    f.features["timescaledb"] = Feature(True, f"version {f.timescaledb_version}, "
                                              f"license {f.license}")  # fmt: skip
    rows = conn.execute(
        "SELECT hypertable_name, compression_enabled FROM timescaledb_information.hypertables "
        "WHERE hypertable_schema = current_schema() ORDER BY 1"
    ).fetchall()
    f.hypertables = [str(r[0]) for r in rows]
    f.features["hypertables"] = Feature(
        bool(f.hypertables), ", ".join(f.hypertables) or "none (migration 0002 did not run?)"
    )
    full = f.license == "timescale"
    no_license = f"not offered under license {f.license} (needs timescaledb.license = timescale)"
    compressed = sorted(str(r[0]) for r in rows if r[1])
    comp_jobs = _jobs(conn, "policy_compression") if full else set()
    if compressed and comp_jobs:
        f.features["compression"] = Feature(True, f"{', '.join(compressed)} after {COMPRESS_AFTER}")
    else:
        f.features["compression"] = Feature(False, no_license if not full else "not enabled")
    if not full:
        f.features["retention"] = Feature(False, no_license)
    elif retention_days is None:
        f.features["retention"] = Feature(False, f"not configured (set {RETENTION_ENV})")
    else:
        ret = _jobs(conn, "policy_retention")
        f.features["retention"] = Feature(
            bool(ret),
            f"{', '.join(sorted(ret))} after {retention_days} days" if ret else "not enabled",
        )
    if not full:
        f.features["continuous_aggregates"] = Feature(False, no_license)
    else:
        n = _one(
            conn,
            "SELECT count(*) FROM timescaledb_information.continuous_aggregates "
            "WHERE view_name = %s",
            (CAGG_NAME,),
        )
        f.features["continuous_aggregates"] = Feature(
            bool(n), f"{CAGG_NAME} (per-minute ticks)" if n else "not enabled"
        )
    return f


Statement = tuple[sql.Composed | str, tuple[Any, ...]]


def _attempt(conn: psycopg.Connection[Any], statements: list[Statement]) -> str | None:
    """Run statements in autocommit; None on success, else the server's first message line."""
    try:
        for query, params in statements:
            conn.execute(query.encode() if isinstance(query, str) else query, params)
    except psycopg.Error as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def ensure(conn: psycopg.Connection[Any], retention_days: int | None = None) -> StoreFeatures:
    """Switch on what the license allows (idempotent), then detect. A failed attempt is reported
    in the feature's reason. The connection must be in autocommit (continuous aggregates cannot
    be created inside a transaction)."""
    if not conn.autocommit:
        raise StoreError("features.ensure needs an autocommit connection")
    f = detect(conn, retention_days)
    if f.license != "timescale":
        return f
    errors: dict[str, str] = {}
    if not f.features["compression"].on:
        stmts: list[Statement] = [(_COMPRESS[t], ()) for t in _COMPRESS if t in f.hypertables]
        stmts += [
            (
                "SELECT add_compression_policy(%s::regclass, %s::interval, if_not_exists => true)",
                (t, COMPRESS_AFTER),
            )
            for t in _COMPRESS
            if t in f.hypertables
        ]
        if (err := _attempt(conn, stmts)) is not None:
            errors["compression"] = err
    if retention_days is not None:
        stmts = []
        # request_blocks (deploy/sql/0110) go with the requests they pack
        for t in ("requests", "request_blocks", "ticks", "server_metrics"):
            if t in f.hypertables:
                # replace, so a changed PEAKLOAD_RETENTION_DAYS takes effect
                stmts.append(
                    ("SELECT remove_retention_policy(%s::regclass, if_exists => true)", (t,))
                )
                stmts.append(
                    (
                        "SELECT add_retention_policy(%s::regclass, make_interval(days => %s))",
                        (t, retention_days),
                    )
                )
        if (err := _attempt(conn, stmts)) is not None:
            errors["retention"] = err
    if not f.features["continuous_aggregates"].on:
        stmts = [
            (_CAGG, ()),
            (
                "SELECT add_continuous_aggregate_policy(%s::regclass, "
                "start_offset => INTERVAL '2 hours', end_offset => INTERVAL '1 minute', "
                "schedule_interval => INTERVAL '1 minute', if_not_exists => true)",
                (CAGG_NAME,),
            ),
        ]
        if (err := _attempt(conn, stmts)) is not None:
            errors["continuous_aggregates"] = err
    f = detect(conn, retention_days)
    for name, err in errors.items():
        if not f.features[name].on:
            f.features[name] = Feature(False, f"attempt failed: {err}")
    return f
