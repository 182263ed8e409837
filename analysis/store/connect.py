"""How the readers open the store: autocommit, and no server-side prepared statements
(loadgen.results.storeformat.PREPARE_THRESHOLD), so a transaction-mode pooler may stand in
front of the database."""

from __future__ import annotations

from typing import Any

import psycopg

from loadgen.results.storeformat import PREPARE_THRESHOLD


def connect_reader(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the store at `url`; raises psycopg.Error."""
    return psycopg.connect(url, autocommit=True, prepare_threshold=PREPARE_THRESHOLD)
