"""`n = 4` end to end against the simulated engine (which streams every choice interleaved, one
token of each per step, each delta with its index): the per-choice ITL and TPOT the instrument
measures, and stores on the embedded store and TimescaleDB, are the sim's fixed ITL, not 1/4 of
it; tokens per choice are the requested output; TTFT is the first token of any choice."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analysis import metrics
from analysis.store import fastload
from loadgen.results import choices, formulas
from loadgen.results.records import Batch, Outcome
from tests.support.shards import make_spec, run_spec
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # ITL measured within 3 ms of the sim's

ITL_MS, OUT, N = 20.0, 12, 4


def test_n4_measured_per_choice_and_stored(
    sim_factory: Any, store_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(
        ["--preset", "fixed", "--ttft-ms", "20", "--itl-ms", str(ITL_MS), "--param", "n=honour"]
    )
    spec = make_spec(
        sim.base_url,
        {"concurrency": [2], "duration_s": 1.5},
        target={"extra_body": {"n": N}},
        workload={"prompt_tokens": 16, "output_tokens": OUT},
    )
    _, sink = run_spec(spec)
    ok = [r for r in sink.records if r.outcome is Outcome.OK]
    assert len(ok) >= 2
    for r in ok:
        c = np.asarray(r.chunk_choices, dtype=np.int64)
        o = np.asarray(r.chunk_offsets_us, dtype=np.int64)
        t = np.asarray(r.chunk_tokens, dtype=np.int64)
        assert choices.n_choices(c) == N
        assert choices.tokens_per_choice(t, c) == dict.fromkeys(range(N), OUT)
        assert r.output_tokens == N * OUT
        itl = formulas.itl_per_token_ms(o, t, c)
        assert itl.size == N * (OUT - 1)
        assert abs(float(np.median(itl)) - ITL_MS) < 3.0, itl  # not ITL_MS / 4
        assert abs(choices.request_tpot_ms(o, t, c) - ITL_MS) < 3.0
        merged = formulas.itl_per_token_ms(o, t)  # the choices as one series: the old bug
        assert float(np.median(merged)) < ITL_MS / 2
        assert r.first_token_ns is not None and r.sent_ns is not None
        first_us = (r.first_token_ns - r.sent_ns) // 1000  # the first token of any choice
        assert first_us == int(o[t > 0].min())
    run_id = str(uuid.uuid4())
    w = StoreWriter(store_url, run_id, WriterConfig(spool_dir=tmp_path / "spool"))
    w.write(Batch([dataclasses.replace(r, run_id=run_id) for r in sink.records]))
    w.flush()
    w.close()
    df, chunks = fastload.load_requests_fast(store_url, run_id)
    rows = df["outcome"].eq("ok").to_numpy()
    itl = metrics.itl_per_token_ms(chunks, rows)
    assert itl.size == rows.sum() * N * (OUT - 1)
    assert abs(float(np.median(itl)) - ITL_MS) < 3.0
    assert abs(float(np.nanmedian(metrics.tpot_ms(df)[rows])) - ITL_MS) < 3.0
