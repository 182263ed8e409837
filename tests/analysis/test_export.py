"""Export round trips: csv, parquet, jsonl read back equal to the stored rows; no content
unless asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analysis.reports.export import export_run
from tests.analysis.storedata import MS, insert_run, level_row, request_row, run_row, streamed
from ui.commands.export import export_command

RUN = "00000000-0000-0000-0000-0000000000e1"
CANARY = "CANARY-PROMPT-7f3a"


def _store(conn: psycopg.Connection[Any]) -> None:
    reqs = [
        streamed(
            RUN,
            0,
            sent_ns=3 * MS + 7,
            offsets_us=[100_000, 120_000, 150_000],
            tokens=[1, 2, 1],
            prompt_text=CANARY,
            response_text="abc",
        ),
        request_row(RUN, 1, outcome="http_error", http_status=503, end_ns=2 * MS),
    ]
    insert_run(conn, run_row(RUN, store_content=True), [level_row(RUN)], reqs)


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_round_trip(pg_conn: psycopg.Connection[Any], tmp_path: Path, fmt: str) -> None:
    _store(pg_conn)
    out = tmp_path / f"r.{fmt}"
    assert export_run(pg_conn, RUN, out, fmt) == 2  # type: ignore[arg-type]
    if fmt == "csv":
        df = pd.read_csv(out)
        offsets = json.loads(df.loc[0, "chunk_offsets_us"])
        sent = int(df.loc[0, "sent_ns"])
    elif fmt == "parquet":
        df = pq.read_table(out).to_pandas()
        offsets = list(df.loc[0, "chunk_offsets_us"])
        sent = int(df.loc[0, "sent_ns"])
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        df = pd.DataFrame(rows)
        offsets, sent = rows[0]["chunk_offsets_us"], rows[0]["sent_ns"]
        assert rows[1]["first_token_ns"] is None and rows[1]["http_status"] == 503
    assert offsets == [100_000, 120_000, 150_000]
    assert sent == 3 * MS + 7  # exact integer ns, no float rounding
    assert "prompt_text" not in df.columns and CANARY not in out.read_bytes().decode("latin-1")


@pytest.mark.integration
def test_cli_include_content(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(pg_conn)
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", pg_conn.peakload_url)  # type: ignore[attr-defined]
    out = tmp_path / "c.jsonl"
    res = CliRunner().invoke(
        export_command, [RUN, "--format", "jsonl", "--out", str(out), "--include-content"]
    )
    assert res.exit_code == 0, res.output
    assert CANARY in out.read_text()
    res = CliRunner().invoke(export_command, [RUN, "--format", "xml", "--out", str(out)])
    assert res.exit_code == 2 and "xml" in res.output
