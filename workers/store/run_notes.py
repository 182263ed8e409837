"""What people add to a stored run: tags (`run_tags`) and notes (`run_notes`), deploy/sql/0230.
A tag is a short word (`baseline`, `regression:tpot`); a note is free text, scrubbed of anything
shaped like a credential before it is stored (loadgen.scrub). analysis/store/notes.py reads them.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from loadgen.errors import PeakloadError
from loadgen.scrub import scrub

TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/=+-]{0,63}$")
MAX_NOTE_CHARS = 10_000


class AnnotationError(PeakloadError):
    """A bad tag or note, or a run that does not exist."""


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag):
        raise AnnotationError(
            f"{tag!r} is not a tag: 1 to 64 of letters, digits and . _ : / = + -, starting "
            "with a letter or digit"
        )
    return tag


def _commit(conn: psycopg.Connection[Any]) -> None:
    if not conn.autocommit:
        conn.commit()


def _run_exists(conn: psycopg.Connection[Any], run_id: str) -> None:
    if conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,)).fetchone() is None:
        _commit(conn)
        raise AnnotationError(f"run {run_id} not found in the store")


def add_tag(conn: psycopg.Connection[Any], run_id: str, tag: str, by: str | None) -> bool:
    """Tag the run; False when it already had the tag (nothing changes then)."""
    check_tag(tag)
    _run_exists(conn, run_id)
    row = conn.execute(
        "INSERT INTO run_tags (run_id, tag, tagged_by) VALUES (%s, %s, %s) "
        "ON CONFLICT (run_id, tag) DO NOTHING RETURNING tag",
        (run_id, tag, by),
    ).fetchone()
    _commit(conn)
    return row is not None


def remove_tag(conn: psycopg.Connection[Any], run_id: str, tag: str) -> bool:
    """Untag the run; False when it did not have the tag."""
    row = conn.execute(
        "DELETE FROM run_tags WHERE run_id = %s AND tag = %s RETURNING tag", (run_id, tag)
    ).fetchone()
    _commit(conn)
    return row is not None


def add_note(conn: psycopg.Connection[Any], run_id: str, text: str, by: str | None) -> int:
    """Append a note to the run (scrubbed); returns its id. Notes are never edited: a
    correction is another note."""
    body = text.strip()
    if not body:
        raise AnnotationError("the note is empty")
    if len(body) > MAX_NOTE_CHARS:
        raise AnnotationError(f"the note has {len(body)} characters; at most {MAX_NOTE_CHARS}")
    if "\x00" in body:
        raise AnnotationError("the note contains a NUL character")
    _run_exists(conn, run_id)
    row = conn.execute(
        "INSERT INTO run_notes (run_id, author, body) VALUES (%s, %s, %s) RETURNING note_id",
        (run_id, by, scrub(body)),
    ).fetchone()
    _commit(conn)
    assert row is not None
    return int(row[0])
