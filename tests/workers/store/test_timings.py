"""The connection and server-timing fields of a record (deploy/sql/0120) through the writer and
back through every read path: request_blocks (format 2), the int[] rows (analysis.store.fastload and
analysis.store.load), exports; a format 1 block and a spool file of the previous layout still read
and replay, with NULL in the fields they predate; on plain PostgreSQL and TimescaleDB alike."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.reports.export import write_requests
from analysis.store import fastload, load, packed
from loadgen.results.records import Batch, RequestRecord
from tests.workers.store._records import make_records
from workers.store import blocks, copyenc
from workers.store.backfill import pack_run
from workers.store.spool import MAGIC_V2, SUFFIX, EncodedBatch
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

NEW = (
    "connect_ns",
    "resent",
    "server_prompt_tokens",
    "server_prefill_ms",
    "server_decode_tokens",
    "server_decode_ms",
    "server_cached_tokens",
    "server_queue_ms",
)


def _timed(run_id: str, n: int, start: int = 0) -> list[RequestRecord]:
    """Records with every shape of the new fields: a new connection or a reused one, a
    re-send, a server that reported all, some or none of its timings, ms with fractions."""
    out = []
    for r in make_records(run_id, n, start=start):
        i = r.index
        reported = i % 5 != 0
        out.append(
            dataclasses.replace(
                r,
                connect_ns=None if i % 3 else 150_000 + 37 * i,
                resent=1 if i % 11 == 4 else 0,
                server_prompt_tokens=100 + i if reported else None,
                server_prefill_ms=12.345 + i / 7 if reported else None,
                server_decode_tokens=16 if reported else None,
                server_decode_ms=16 * 20.125 + i * 1e-3 if reported else None,
                server_cached_tokens=64 if reported and i % 2 else None,
                server_queue_ms=3.5 + i / 3 if reported and i % 4 == 1 else None,
            )
        )
    return out


def _write(url: str, run_id: str, records: list[RequestRecord], spool: Path, per: int) -> None:
    w = StoreWriter(url, run_id, WriterConfig(spool_dir=spool, batch_max_s=0.05))
    for i in range(0, len(records), per):
        w.write(Batch(records[i : i + per]))
        w.flush()  # one block per write
    w.close()


def _expected(records: list[RequestRecord]) -> pd.DataFrame:
    """The new fields as the readers give them: float64, NaN for None; ordered by idx."""
    values = {c: [getattr(r, c) for r in records] for c in NEW}
    return pd.DataFrame(
        {c: [np.nan if v is None else float(v) for v in vs] for c, vs in values.items()}
    )


def _by_idx(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("idx").reset_index(drop=True)[list(NEW)]


def _all_paths(url: str, run_id: str) -> dict[str, pd.DataFrame]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = load.load_requests(conn, run_id)
    return {
        "blocks": _by_idx(fastload.load_requests_fast(url, run_id)[0]),
        "int[] rows (fastload)": _by_idx(fastload.load_requests_fast(url, run_id, packed=False)[0]),
        "int[] rows (load)": _by_idx(rows),
    }


def test_the_new_fields_round_trip_through_every_read_path(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _timed(run_id, 600)
    _write(store_url, run_id, records, tmp_path / "spool", 200)
    with psycopg.connect(store_url) as conn:
        assert packed.load_packed(conn, run_id) is not None
        formats = conn.execute(
            "SELECT DISTINCT format FROM request_blocks WHERE run_id = %s", (run_id,)
        ).fetchall()
        assert formats == [(blocks.FORMAT,)] == [(2,)]
        stored = conn.execute(
            "SELECT connect_ns, resent, server_prefill_ms, server_queue_ms FROM requests "
            "WHERE run_id = %s AND idx = 1",
            (run_id,),
        ).fetchone()
    r1 = records[1]
    assert stored == (None, 0, r1.server_prefill_ms, r1.server_queue_ms)  # doubles, exact
    want = _expected(records)
    for path, got in _all_paths(store_url, run_id).items():
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=path)
    # the export keeps counts as integers and ms as given
    with psycopg.connect(store_url, autocommit=True) as conn:
        df = load.load_requests(conn, run_id)
    write_requests(df, tmp_path / "out.parquet", "parquet")
    out = pd.read_parquet(tmp_path / "out.parquet").sort_values("idx").reset_index(drop=True)
    assert str(out["connect_ns"].dtype) == "Int64" and str(out["resent"].dtype) == "Int64"
    assert out.loc[0, "connect_ns"] == records[0].connect_ns and pd.isna(out.loc[1, "connect_ns"])
    assert out.loc[4, "resent"] == 1 and out.loc[1, "server_prefill_ms"] == r1.server_prefill_ms


def test_a_batch_without_server_timings_stores_nulls(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = make_records(run_id, 300)  # what most APIs give: no server timings
    _write(store_url, run_id, records, tmp_path / "spool", 300)
    for path, got in _all_paths(store_url, run_id).items():
        pd.testing.assert_frame_equal(got, _expected(records), check_exact=True, obj=path)
        assert (got["resent"] == 0).all() and got["server_prefill_ms"].isna().all(), path


# ------------------------------------------------------------ what the previous formats wrote


def _fields(payload: bytes) -> list[list[bytes | None]]:
    """The tuples of a binary COPY payload, as raw field values (None: NULL)."""
    pos = 19  # signature, flags, header extension
    rows = []
    while True:
        (n,) = struct.unpack_from(">h", payload, pos)
        pos += 2
        if n == -1:
            return rows
        row: list[bytes | None] = []
        for _ in range(n):
            (size,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            row.append(None if size < 0 else payload[pos : pos + size])
            pos += max(size, 0)
        rows.append(row)


def _payload(rows: list[list[bytes | None]]) -> bytes:
    parts = [copyenc.HEADER]
    for row in rows:
        parts.append(struct.pack(">h", len(row)))
        for v in row:
            parts.append(struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v)
    parts.append(copyenc.TRAILER)
    return b"".join(parts)


def _format1_body(body: bytes) -> bytes:
    """A format 2 body as the previous writer packed it: format 1's 17 int64 fields."""
    magic, n, c, d = blocks.HEAD.unpack_from(body)
    assert magic == b"PLBLOCK2"
    head = blocks.HEAD.pack(b"PLBLOCK1", n, c, d)
    scalars = body[blocks.HEAD.size : blocks.HEAD.size + 8 * 17 * n]
    return head + scalars + body[blocks.HEAD.size + 8 * 25 * n :]


def _previous_writer(records: list[RequestRecord]) -> EncodedBatch:
    """The batch the writer before deploy/sql/0120 made of `records`: 33 request columns and
    a format 1 block."""
    req, blk = copyenc.encode_batch(records, False)
    old_rows = [row[:33] for row in _fields(req)]
    old_blocks = []
    for row in _fields(blk):
        body = row[6]
        assert body is not None
        old_blocks.append([*row[:3], struct.pack(">h", 1), *row[4:6], _format1_body(body)])
    return EncodedBatch(_payload(old_rows), b"", len(records), 0, _payload(old_blocks), layout=1)


def _spool_v2(batch: EncodedBatch) -> bytes:
    """A spool file as the previous writer wrote it (PLSPOOL2: no layout in its header)."""
    lens = (len(batch.requests), len(batch.ticks), len(batch.blocks))
    head = struct.pack(">8sIIQQQ", MAGIC_V2, batch.n_records, batch.n_ticks, *lens)
    return head + batch.requests + batch.ticks + batch.blocks


def test_a_spool_of_the_previous_layout_replays_and_its_format_1_blocks_read(
    store_url: str, tmp_path: Path
) -> None:
    run_id = str(uuid.uuid4())
    old = make_records(run_id, 250)
    new = _timed(run_id, 250, start=250)
    root = tmp_path / "spool"
    gone = root / "w-1-deadbeef"  # a writer that died before 0120 left a batch behind
    gone.mkdir(parents=True)
    (gone / ".lock").touch()
    (gone / f"{1:012d}{SUFFIX}").write_bytes(_spool_v2(_previous_writer(old)))
    assert EncodedBatch.from_bytes(_spool_v2(_previous_writer(old)), "x").layout == 1
    w = StoreWriter(store_url, run_id, WriterConfig(spool_dir=root, batch_max_s=0.05))
    w.write(Batch(new))
    w.close()
    assert w.stats().replayed_batches == 1 and w.stats().rows_inserted == 500
    with psycopg.connect(store_url) as conn:
        formats = conn.execute(
            "SELECT format, sum(n_requests) FROM request_blocks WHERE run_id = %s "
            "GROUP BY format ORDER BY format",
            (run_id,),
        ).fetchall()
        assert formats == [(1, 250), (2, 250)]  # one run, both formats
        assert packed.load_packed(conn, run_id) is not None
    # the old rows: NULL in every new column, resent included (not recorded)
    want = _expected(old + new)
    want.loc[:249, "resent"] = np.nan
    paths = _all_paths(store_url, run_id)
    for path, got in paths.items():
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=path)
    # and the other columns read alike from the format 1 block and the rows
    fast = fastload.load_requests_fast(store_url, run_id)[0].sort_values("idx")
    slow = fastload.load_requests_fast(store_url, run_id, packed=False)[0].sort_values("idx")
    pd.testing.assert_frame_equal(fast.reset_index(drop=True), slow.reset_index(drop=True))
    # a load leaving the chunk arrays in the store reads each format's sections where they are
    full_df, full_ch = fastload.load_requests_fast(store_url, run_id)
    df, pending = fastload.load_requests_deferred(store_url, run_id)
    assert isinstance(pending, fastload.PendingChunks)
    pd.testing.assert_frame_equal(df, full_df)
    ch = fastload.load_pending_chunks(store_url, pending)
    assert full_ch.offsets_us.size > 0
    for name in ("offsets_us", "tokens", "ptr"):
        assert np.array_equal(getattr(ch, name), getattr(full_ch, name)), name


def test_a_run_packed_later_keeps_the_new_fields_and_their_nulls(
    store_url: str, tmp_path: Path
) -> None:
    run_id = str(uuid.uuid4())
    records = _timed(run_id, 400)
    _write(store_url, run_id, records, tmp_path / "spool", 400)
    with psycopg.connect(store_url, autocommit=True) as conn:
        # some rows as stored before 0120: nothing on record
        conn.execute(
            "UPDATE requests SET connect_ns = NULL, resent = NULL WHERE run_id = %s AND idx < 40",
            (run_id,),
        )
    assert pack_run(store_url, run_id, batch_rows=150) == 3
    want = _expected(records)
    want.loc[:39, ["connect_ns", "resent"]] = np.nan
    for path, got in _all_paths(store_url, run_id).items():
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=path)


# ------------------------------------------------------------ a real run, record to summary


@pytest.mark.serial  # client ITL against the engine's own within 10 %: the cores alone
def test_a_local_run_against_a_server_reporting_timings_keeps_them(
    store_url: str, tmp_path: Path
) -> None:
    from analysis.reports.summary import summarize_run
    from loadgen.runspec.spec import spec_from_dict
    from tests.support.sim import start_sim
    from workers.local import run_local

    # llama.cpp's manners: `timings` closing each stream; a connection closed (saying so)
    # after every response, so every request opens its own
    args = ["--preset", "fixed", "--ttft-ms", "30", "--itl-ms", "5", "--report-timings",
            "--close-after", "response"]  # fmt: skip
    with start_sim(args, tmp_path) as sim:
        spec = spec_from_dict({
            "name": "timed",
            "target": {"api": "openai-chat", "base_url": sim.base_url, "model": "sim-fixed"},
            "workload": {"prompt_tokens": 32, "output_tokens": 6, "seed": 1},
            "load": {"concurrency": [2], "duration_s": 2},
            "validity": {"max_loop_lag_p99_ms": 1e4, "max_dispatch_delay_p99_ms": 1e4,
                         "max_cpu_percent": 1e4},  # a shared test box: validity not under test
        })  # fmt: skip
        run_id = run_local(spec, database_url=store_url).run_id
    with psycopg.connect(store_url, autocommit=True) as conn:
        df = load.load_requests(conn, run_id)
        summary = summarize_run(conn, run_id)
    ok = df[df["outcome"] == "ok"]
    assert len(ok) >= 10 and len(ok) == len(df)
    # the server's own counts, as it reported them beside its usage
    assert (ok["server_decode_tokens"] == ok["usage_completion_tokens"]).all()
    assert (ok["server_prompt_tokens"] == ok["usage_prompt_tokens"]).all()
    assert ok["server_prefill_ms"].notna().all() and (ok["server_decode_ms"] > 0).all()
    assert ok["server_queue_ms"].isna().all()  # llama.cpp does not report one
    # each opened its own connection but the first of each user, sent on one warmed up before
    opened = ok["connect_ns"].notna()
    assert (~opened).sum() <= 2 and (ok.loc[opened, "connect_ns"] > 0).all()
    assert (ok["resent"] == 0).all()
    (level,) = summary["levels"]
    assert summary["server_timings"] is True and summary["resent"] == 0
    assert level["connections"]["new_share"] == opened.sum() / len(df)
    assert level["connections"]["opened"] == opened.sum()
    steady = int((ok["phase"] == "steady").sum())
    cvs = level["client_vs_server"]
    assert cvs["ttft_n"] == cvs["itl_n"] == steady
    assert cvs["ttft_gap_ms"] == cvs["client_ttft_p50_ms"] - cvs["server_prefill_p50_ms"]
    # the server's decode time spans 5 gaps of 5 ms for 6 tokens: 5 ms between its tokens, as
    # the client sees them (M12's bound); over all 6 tokens it would read 4.17 ms, 17 % off
    assert abs(cvs["itl_gap_ms"]) <= 0.1 * cvs["server_itl_p50_ms"]
    # the same from the blocks the writer packed as from the rows
    for path, got in _all_paths(store_url, run_id).items():
        pd.testing.assert_frame_equal(got, _by_idx(df), check_exact=True, obj=path)
