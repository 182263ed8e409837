"""Exporting a run's requests, one row per request with its timestamps and per-chunk offsets:
CSV (arrays as JSON strings), Parquet (list columns) or JSON lines. Prompt and response text
only when asked (`include_content`), and only if the run stored it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.store.load import load_requests
from loadgen.results.storeformat import CONTENT_COLUMNS, NULLABLE_INT_COLUMNS

Format = Literal["csv", "parquet", "jsonl"]
FORMATS: tuple[Format, ...] = ("csv", "parquet", "jsonl")
_ARRAYS = ("chunk_offsets_us", "chunk_tokens")


def export_frame(df: pd.DataFrame, *, include_content: bool = False) -> pd.DataFrame:
    """The exported columns: nullable integers for ns offsets and counts (no float rounding),
    `scheduled_at` as UTC, arrays as lists of int; content columns dropped unless asked."""
    out = df.copy()
    if not include_content:
        out = out.drop(columns=[c for c in CONTENT_COLUMNS if c in out.columns])
    for c in NULLABLE_INT_COLUMNS:
        if c in out.columns:
            out[c] = out[c].round().astype("Int64")
    for c in _ARRAYS:
        if c in out.columns:
            out[c] = pd.Series(
                [np.asarray(a, dtype=np.int64).tolist() for a in out[c]],
                index=out.index,
                dtype=object,
            )
    if "chunk_choices" in out.columns:  # n > 1 (deploy/sql/0190); None where all choice 0
        out["chunk_choices"] = pd.Series(
            [
                None if a is None else np.asarray(a, dtype=np.int64).tolist()
                for a in out["chunk_choices"]
            ],
            index=out.index,
            dtype=object,
        )
    return out


def write_requests(
    df: pd.DataFrame, path: str | Path, fmt: Format, *, include_content: bool = False
) -> int:
    """Write `df` (as from load_requests) to `path` in `fmt`; returns the rows written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    out = export_frame(df, include_content=include_content)
    p = Path(path)
    if fmt == "csv":
        csv = out.copy()
        for c in (*_ARRAYS, "chunk_choices"):
            if c in csv.columns:
                csv[c] = [json.dumps(a) for a in csv[c]]
        csv["scheduled_at"] = csv["scheduled_at"].map(lambda t: t.isoformat())
        csv.to_csv(p, index=False)
    elif fmt == "jsonl":
        with p.open("w", encoding="utf-8") as f:
            for rec in out.to_dict(orient="records"):
                f.write(json.dumps({k: _jsonable(v) for k, v in rec.items()}) + "\n")
    else:
        table = pa.Table.from_pandas(out, preserve_index=False)
        for c in _ARRAYS:
            if c in out.columns:
                i = table.schema.get_field_index(c)
                table = table.set_column(i, c, pa.array(out[c].tolist(), type=pa.list_(pa.int64())))
        pq.write_table(table, p)
    return len(out)


def _jsonable(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def export_run(
    conn: psycopg.Connection[Any],
    run_id: str,
    path: str | Path,
    fmt: Format,
    *,
    include_content: bool = False,
) -> int:
    """Load one run's requests from the store and write them; returns the rows written."""
    df = load_requests(conn, run_id, include_content=include_content)
    return write_requests(df, path, fmt, include_content=include_content)
