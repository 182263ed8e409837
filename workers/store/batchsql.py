"""The SQL of one writer batch: the direct and the idempotent (TEMP staging + INSERT ... ON
CONFLICT DO NOTHING) transaction, each opening with what it needs of the session (the staging
tables, a bound on idle time) so it runs on whichever server connection a transaction-mode
pooler hands it, and breaking a connection stuck past its I/O deadline. Identifiers through
psycopg.sql only."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import psycopg
from psycopg import sql

from loadgen.results.storeformat import BLOCK_COLUMNS, REQUEST_LAYOUTS, TICK_COLUMNS
from workers.store.connect import pg_connect
from workers.store.spool import EncodedBatch

_REQ_COLS = {
    layout: sql.SQL(", ").join(map(sql.Identifier, cols))
    for layout, cols in REQUEST_LAYOUTS.items()
}
_TICK_COLS = sql.SQL(", ").join(map(sql.Identifier, TICK_COLUMNS))
_BLOCK_COLS = sql.SQL(", ").join(map(sql.Identifier, BLOCK_COLUMNS))
_STAGE_REQ, _STAGE_TICKS = sql.Identifier("pl_stage_requests"), sql.Identifier("pl_stage_ticks")
_STAGE_BLOCKS = sql.Identifier("pl_stage_blocks")
_SETUP = [
    sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE requests) ON COMMIT DELETE ROWS").format(
        _STAGE_REQ
    ),
    sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE ticks) ON COMMIT DELETE ROWS").format(
        _STAGE_TICKS
    ),
]
_COPY = "COPY {} ({}) FROM STDIN (FORMAT BINARY)"
# per copyenc layout (an older spooled payload has fewer columns)
COPY_STAGED_REQ = {k: sql.SQL(_COPY).format(_STAGE_REQ, c) for k, c in _REQ_COLS.items()}
COPY_STAGED_TICKS = sql.SQL(_COPY).format(_STAGE_TICKS, _TICK_COLS)
COPY_DIRECT_REQ = {
    k: sql.SQL(_COPY).format(sql.Identifier("requests"), c) for k, c in _REQ_COLS.items()
}
COPY_DIRECT_TICKS = sql.SQL(_COPY).format(sql.Identifier("ticks"), _TICK_COLS)
COPY_STAGED_BLOCKS = sql.SQL(_COPY).format(_STAGE_BLOCKS, _BLOCK_COLS)
COPY_DIRECT_BLOCKS = sql.SQL(_COPY).format(sql.Identifier("request_blocks"), _BLOCK_COLS)
_INSERT = "INSERT INTO {0} ({1}) SELECT {1} FROM {2} ON CONFLICT DO NOTHING"
INSERT_REQ = {
    k: sql.SQL(_INSERT).format(sql.Identifier("requests"), c, _STAGE_REQ)
    for k, c in _REQ_COLS.items()
}
INSERT_TICKS = sql.SQL(_INSERT).format(sql.Identifier("ticks"), _TICK_COLS, _STAGE_TICKS)
INSERT_BLOCKS = sql.SQL(_INSERT).format(
    sql.Identifier("request_blocks"), _BLOCK_COLS, _STAGE_BLOCKS
)
_SETUP_BLOCKS = sql.SQL(
    "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE request_blocks) ON COMMIT DELETE ROWS"
).format(_STAGE_BLOCKS)


def connect_writer(
    url: str, connect_timeout_s: int, application_name: str
) -> tuple[psycopg.Connection[Any], bool]:
    """An autocommit connection with TCP keepalives, and whether the store has
    `request_blocks` (a store migrated before deploy/sql/0110 gets no blocks). Raises
    psycopg.Error."""
    conn = pg_connect(
        url,
        autocommit=True,
        connect_timeout=connect_timeout_s,
        application_name=application_name,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=3,
        keepalives_count=3,
    )
    try:
        row = conn.execute("SELECT to_regclass('request_blocks') IS NOT NULL").fetchone()
    except psycopg.Error:
        conn.close()
        raise
    return conn, bool(row and row[0])


def prologue(*, staged: bool, with_blocks: bool, pause_s: float = 0.0) -> sql.Composed:
    """The statements a batch's transaction opens with, all of them local to it or idempotent:
    a server-side bound on the transaction left idle by a vanished writer (so its row locks do
    not block the replay for long), no NOTICE per batch, and for the idempotent path the TEMP
    staging tables (made once per server connection, emptied at every commit)."""
    idle_s = max(60, int(pause_s) + 30)
    stmts = [
        sql.SQL("SET LOCAL idle_in_transaction_session_timeout = {}").format(
            sql.Literal(f"{idle_s}s")
        ),
        sql.SQL("SET LOCAL client_min_messages = warning"),
    ]
    if staged:
        stmts += [*_SETUP, *([_SETUP_BLOCKS] if with_blocks else [])]
    return sql.SQL("; ").join(stmts)


def write_batch(
    conn: psycopg.Connection[Any],
    enc: EncodedBatch,
    *,
    staged: bool,
    pause_s: float = 0.0,
    with_blocks: bool = True,
) -> tuple[int, int]:
    """One transaction: COPY straight into the tables (`staged=False`; raises UniqueViolation
    if any row exists, and nothing is kept), or COPY into staging then INSERT ... ON CONFLICT DO
    NOTHING. The batch's request_blocks rows go with it unless `with_blocks` is False. Returns
    rows inserted into (requests, ticks). `pause_s` (tests only) sleeps before COMMIT."""
    inserted = ticks_inserted = 0
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(prologue(staged=staged, with_blocks=with_blocks, pause_s=pause_s))
        if enc.n_records:
            copy = COPY_STAGED_REQ if staged else COPY_DIRECT_REQ
            with cur.copy(copy[enc.layout]) as cp:
                cp.write(enc.requests)
            inserted = enc.n_records
        if enc.n_ticks:
            with cur.copy(COPY_STAGED_TICKS if staged else COPY_DIRECT_TICKS) as cp:
                cp.write(enc.ticks)
            ticks_inserted = enc.n_ticks
        if staged and enc.n_records:
            cur.execute(INSERT_REQ[enc.layout])
            inserted = max(cur.rowcount, 0)
        if staged and enc.n_ticks:
            cur.execute(INSERT_TICKS)
            ticks_inserted = max(cur.rowcount, 0)
        if with_blocks and enc.blocks:
            with cur.copy(COPY_STAGED_BLOCKS if staged else COPY_DIRECT_BLOCKS) as cp:
                cp.write(enc.blocks)
            if staged:
                cur.execute(INSERT_BLOCKS)
        if pause_s > 0:
            time.sleep(pause_s)
    return inserted, ticks_inserted


def shutdown_socket(conn: psycopg.Connection[Any]) -> None:
    """Break a connection stuck past the I/O timeout (e.g. a silent network): the blocked call
    in the writer thread then fails with OperationalError and the batch is spooled."""
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as s:
            s.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # already closed
