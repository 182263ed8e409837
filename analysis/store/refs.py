"""Which run a user means: a full id, a unique id prefix, or a name only one run has. One query
and no analysis (no pandas), so a command given a reference that matches nothing, or several
runs, answers before it loads what it would analyse with."""

from __future__ import annotations

from typing import Any

import psycopg

CANDIDATES_SHOWN = 10
ID_CHARS = frozenset("0123456789abcdef-")  # what a run id (a UUID) is written with


def resolve_run_id(conn: psycopg.Connection[Any], ref: str) -> str:
    """A run given by full id, unique id prefix, or a name only one run has, matched literally
    (no character is a wildcard); LookupError (its message listing the candidates, newest
    first) when none matches, or when several do (by prefix, by name, or one each)."""
    prefix = ref.lower() if ref and set(ref.lower()) <= ID_CHARS else None
    with conn.cursor() as cur:
        cur.execute(
            "SELECT run_id::text, name, status, created_at FROM runs "
            "WHERE starts_with(run_id::text, %s) OR name = %s ORDER BY created_at DESC, run_id",
            (prefix, ref),
        )
        rows = cur.fetchall()
    if not rows:
        raise LookupError(f"no run matches {ref!r} (by id, id prefix or name)")
    for r in rows:
        if r[0] == prefix:
            return str(r[0])
    found = rows
    if len(found) == 1:
        return str(found[0][0])
    what = f"{ref!r} (as an id prefix or a name)"
    shown = "; ".join(
        f"{r[0]} ({r[1]}, {r[2]}, created {r[3]:%Y-%m-%d %H:%M:%S})"
        for r in found[:CANDIDATES_SHOWN]
    )
    more = f"; and {len(found) - CANDIDATES_SHOWN} more" if len(found) > CANDIDATES_SHOWN else ""
    raise LookupError(
        f"{what} matches {len(found)} runs; give a full id or a longer prefix. Newest first: "
        f"{shown}{more}"
    )
