"""A binary `COPY ... TO STDOUT` read at the libpq level (one call per message, no Python object
per row), shared by the two fast readers: the int[] rows (`analysis.store.fastload`) and the packed
blocks (`analysis.store.packed`). The caller reads `pgconn.get_copy_data(0)` until it returns <
0."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import pq

from analysis.store.connect import connect_reader

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = len(SIGNATURE) + 8  # signature, flags, header extension length (0)


@contextlib.contextmanager
def copy_out(
    url_or_conn: str | psycopg.Connection[Any], query: bytes, what: str
) -> Iterator[pq.abc.PGconn]:
    """Start `query` (a COPY TO STDOUT) and yield the libpq connection to read it from; a
    connection opened here from a URL is closed after. A failure to start, or an error the
    server reports at the end, raises DatabaseError naming `what`."""
    own = isinstance(url_or_conn, str)
    conn = connect_reader(url_or_conn) if isinstance(url_or_conn, str) else url_or_conn
    try:
        with conn.lock:
            pg = conn.pgconn
            pg.send_query(query)
            res = pg.get_result()
            if res is None or res.status != pq.ExecStatus.COPY_OUT:
                msg = res.error_message.decode(errors="replace") if res is not None else ""
                while pg.get_result() is not None:
                    pass
                raise psycopg.DatabaseError(f"{what} failed: {msg}")
            yield pg
            error = ""
            while (res := pg.get_result()) is not None:
                if res.status == pq.ExecStatus.FATAL_ERROR:
                    error = res.error_message.decode(errors="replace")
            if error:
                raise psycopg.DatabaseError(f"{what} failed: {error}")
    finally:
        if own:
            conn.close()
