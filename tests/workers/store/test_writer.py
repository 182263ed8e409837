"""StoreWriter on real databases: every record and tick stored once, field for field; D2 a batch
replayed three times; S2 content only on opt-in; a full spool fails loudly; a spool left by an
unreachable store is adopted and replayed by the next writer of the run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loadgen.errors import SpoolFullError, StoreError
from loadgen.results.records import Batch
from tests.support.ports import free_port
from tests.support.stores import ledger_check
from tests.workers.store._records import feed, make_records, make_ticks
from ui.commands.db import db as db_command
from workers.store.spool import SUFFIX, EncodedBatch
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

CANARY_PROMPT = "canary-prompt-7f3a9c"
CANARY_RESPONSE = "canary-response-51be02"


def _writer(url: str, run_id: str, tmp_path: Path, **kw: Any) -> StoreWriter:
    kw.setdefault("batch_max_s", 0.1)
    return StoreWriter(url, run_id, WriterConfig(spool_dir=tmp_path / "spool", **kw))


def test_every_record_and_tick_is_stored_field_for_field(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    writer = _writer(store_url, run_id, tmp_path, batch_max_rows=300)
    ids = feed(writer, run_id, 1_000, 64)
    writer.write(Batch([], make_ticks(run_id, 7)))
    writer.close()
    stats = writer.stats()
    assert stats.records_received == 1_000 and stats.rows_inserted == 1_000
    assert stats.ticks_inserted == 7 and stats.rows_duplicate == 0 and stats.records_lost == 0
    assert stats.batches_committed >= 4  # bounded by batch_max_rows
    assert stats.lag_p50_s is not None and stats.lag_max_s is not None
    with psycopg.connect(store_url) as conn:
        assert ledger_check(conn, run_id, ids) == 1_000
        want = make_records(run_id, 1, start=10)[0]
        row = conn.execute(
            "SELECT scheduled_at, level, idx, outcome, http_status, sent_ns, first_token_ns, "
            "end_ns, output_tokens, token_source, chunk_offsets_us, chunk_tokens, "
            "extract(epoch FROM scheduled_at)::numeric * 1000000 "
            "FROM requests WHERE request_id = %s",
            (want.request_id,),
        ).fetchone()
        assert row is not None
        assert int(row[12]) == want.scheduled_at_ns // 1000
        assert row[1:12] == (want.level, want.index, want.outcome.value, want.http_status,
                             want.sent_ns, want.first_token_ns, want.end_ns,
                             want.output_tokens, want.token_source.value,
                             want.chunk_offsets_us, want.chunk_tokens)  # fmt: skip
        failed = conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = %s AND outcome = 'http_error' "
            "AND chunk_offsets_us = '{}' AND first_token_ns IS NULL",
            (run_id,),
        ).fetchone()
        assert failed is not None and failed[0] == sum(1 for i in range(1_000) if i % 7 == 3)
        ticks = conn.execute(
            "SELECT count(*), sum(completed), max(rss_bytes) FROM ticks WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert ticks == (7, 63, 50_000_000)


def test_d2_a_batch_replayed_three_times_leaves_one_row_each(
    store_url: str, tmp_path: Path
) -> None:
    run_id = str(uuid.uuid4())
    records = make_records(run_id, 200)
    writer = _writer(store_url, run_id, tmp_path)
    for _ in range(3):
        writer.write(Batch(list(records), make_ticks(run_id, 3)))
        assert writer.flush(30)
    writer.close()
    stats = writer.stats()
    assert stats.rows_inserted == 200 and stats.rows_duplicate == 400
    assert stats.ticks_inserted == 3
    assert stats.direct_fallbacks == 2  # the 2nd and 3rd copies went through staging
    with psycopg.connect(store_url) as conn:
        ledger_check(conn, run_id, [r.request_id for r in records])
        n = conn.execute("SELECT count(*) FROM ticks WHERE run_id = %s", (run_id,)).fetchone()
        assert n == (3,)


def test_a_batch_overlapping_stored_rows_adds_only_the_new_ones(
    store_url: str, tmp_path: Path
) -> None:
    run_id = str(uuid.uuid4())
    writer = _writer(store_url, run_id, tmp_path)
    writer.write(Batch(make_records(run_id, 100)))
    assert writer.flush(30)
    writer.write(Batch(make_records(run_id, 100, start=50)))
    writer.close()
    stats = writer.stats()
    assert (stats.rows_inserted, stats.rows_duplicate, stats.direct_fallbacks) == (150, 50, 1)
    with psycopg.connect(store_url) as conn:
        ledger_check(conn, run_id, [r.request_id for r in make_records(run_id, 150)])


@pytest.mark.parametrize("store_content", [False, True])
def test_s2_content_is_stored_only_on_opt_in(
    store_url: str, tmp_path: Path, store_content: bool
) -> None:
    run_id = str(uuid.uuid4())
    records = make_records(run_id, 20, prompt=CANARY_PROMPT, response=CANARY_RESPONSE)
    writer = _writer(store_url, run_id, tmp_path, store_content=store_content)
    writer.write(Batch(records, make_ticks(run_id, 2)))
    writer.close()
    with psycopg.connect(store_url) as conn:
        ledger_check(conn, run_id, [r.request_id for r in records])
        hits = conn.execute(
            "SELECT count(*) FROM requests r WHERE run_id = %s AND r::text LIKE %s",
            (run_id, f"%{CANARY_PROMPT}%"),
        ).fetchone()
        texts = conn.execute(
            "SELECT count(prompt_text), count(response_text) FROM requests WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        ticks = conn.execute("SELECT count(*) FROM ticks WHERE run_id = %s", (run_id,)).fetchone()
    assert ticks == (2,)
    if store_content:
        assert hits == (20,) and texts == (20, 20)
    else:
        assert hits == (0,) and texts == (0, 0)


def _unreachable_url() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"


def test_a_full_spool_fails_the_run_loudly_and_writes_nothing_half(tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    writer = _writer(_unreachable_url(), run_id, tmp_path, spool_max_bytes=60_000,
                     batch_max_rows=50, connect_timeout_s=2, close_timeout_s=0.5)  # fmt: skip
    feed(writer, run_id, 400, 50)
    assert writer.flush(60)
    assert writer.failed
    with pytest.raises(SpoolFullError, match=r"store spool full: .* limit 60000"):
        writer.close()
    stats = writer.stats()
    assert stats.spooled_batches >= 1 and stats.records_lost > 0
    assert stats.records_lost + 50 * stats.spooled_batches == 400
    files = list((tmp_path / "spool").rglob("*"))
    assert not [f for f in files if f.suffix == ".tmp"], files
    batches = [f for f in files if f.suffix == SUFFIX]
    assert len(batches) == stats.spooled_batches
    assert sum(f.stat().st_size for f in batches) <= 60_000
    for f in batches:  # each one complete
        assert EncodedBatch.from_bytes(f.read_bytes(), str(f)).n_records == 50


def test_a_spool_left_behind_is_replayed_by_the_next_writer(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    first = _writer(_unreachable_url(), run_id, tmp_path, connect_timeout_s=2, batch_max_rows=100,
                    close_timeout_s=0.5)  # fmt: skip
    ids = feed(first, run_id, 300, 100)
    with pytest.raises(StoreError, match="remain spooled"):
        first.close()
    assert first.stats().spooled_batches == 3 and not first.failed
    second = _writer(store_url, run_id, tmp_path)
    ids += feed(second, run_id, 100, 100, start=300)
    second.close()
    assert second.stats().replayed_batches == 3
    with psycopg.connect(store_url) as conn:
        ledger_check(conn, run_id, ids)
    assert not list((tmp_path / "spool").rglob("*" + SUFFIX))


def test_db_replay_replays_what_a_gone_writer_left(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PEAKLOAD_HOME", str(tmp_path))
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", store_url)
    run_id = str(uuid.uuid4())
    first = StoreWriter(_unreachable_url(), run_id, WriterConfig(batch_max_rows=100,
                        connect_timeout_s=2, close_timeout_s=0.5))  # fmt: skip
    ids = feed(first, run_id, 300, 100)
    with pytest.raises(StoreError, match="remain spooled"):
        first.close()
    out = CliRunner().invoke(db_command, ["replay"])
    assert out.exit_code == 0, out.output
    assert f"run {run_id}: 3 spooled batches replayed" in out.output
    with psycopg.connect(store_url) as conn:
        ledger_check(conn, run_id, ids)
    assert "nothing spooled" in CliRunner().invoke(db_command, ["replay"]).output


def test_write_after_close_is_an_error(plain_url: str, tmp_path: Path) -> None:
    writer = _writer(plain_url, str(uuid.uuid4()), tmp_path)
    writer.close()
    with pytest.raises(StoreError, match="after close"):
        writer.write(Batch())
