"""The OTLP export counts a stored run as the live metrics counted its records: the same records
fed to a LiveMetrics registry (loadgen.engine.livemetrics) and written through the store writer,
then exported from the store (analysis.reports.otlp), give equal counts, sums and buckets for
every instrument and label set, values on bucket bounds included; a push that is refused is one
clear error."""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.reports.otlp import PushError, otlp_metrics, push_otlp, write_otlp
from analysis.store.load import load_requests
from loadgen.engine.livemetrics import LiveMetrics
from loadgen.results import genai
from loadgen.results.records import Batch, Outcome, RequestRecord, make_request_id
from tests.support.ports import free_port
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

MS = 1_000_000


def varied_records(run_id: str, n: int, seed: int = 7) -> list[RequestRecord]:
    """Ok and failed requests in two regions: TTFTs on and between bucket bounds, chunks of
    several tokens and of none, n > 1 choices, usage present or not, a timeout never ended."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        region = "eu" if i % 2 else "us"
        kind = i % 10
        outcome = {7: Outcome.HTTP_ERROR, 8: Outcome.TIMEOUT, 9: Outcome.STREAM_ERROR}.get(
            kind, Outcome.OK
        )
        sent = int(rng.integers(0, 2 * MS))
        ttft = (
            [100 * MS, 250 * MS, 10 * MS][i % 3]
            if i % 4 == 0
            else int(rng.integers(MS, 3_000_000_000))
        )
        k = int(rng.integers(2, 40))
        gaps = rng.choice([1_000, 2_500, 10_000, 40_000, int(rng.integers(1, 3_000_000))], size=k)
        offs = (ttft // 1000 + np.cumsum(gaps) - gaps[0]).tolist()
        tokens = rng.choice([0, 1, 1, 1, 3], size=k).tolist()
        tokens[0] = 1
        choices = (np.arange(k) % 2).tolist() if i % 5 == 0 else []
        ok = outcome is Outcome.OK
        end = None if outcome is Outcome.TIMEOUT else sent + ttft + int(offs[-1]) * 1000
        out.append(
            RequestRecord(
                request_id=make_request_id(run_id, "s0", i),
                run_id=run_id,
                shard_id="s0",
                region=region,
                level=0,
                index=i,
                scheduled_at_ns=1_795_000_000_000_000_000 + i * MS,
                outcome=outcome,
                http_status=503 if outcome is Outcome.HTTP_ERROR else None,
                sent_ns=sent,
                first_token_ns=sent + ttft if outcome is not Outcome.HTTP_ERROR else None,
                end_ns=end,
                prompt_tokens=int(rng.integers(1, 5000)),
                usage_prompt_tokens=int(rng.integers(1, 5000)) if i % 3 else None,
                output_tokens=sum(tokens) if ok else 0,
                client_tokens=sum(tokens),
                chunk_offsets_us=[int(x) for x in offs] if ok or kind == 9 else [],
                chunk_tokens=[int(x) for x in tokens] if ok or kind == 9 else [],
                chunk_choices=choices if ok else [],
            )
        )
    return out


def registry_points(live: LiveMetrics, inst: genai.Instrument) -> dict[tuple[str, ...], Any]:
    """Each label set's (count, sum, per-bucket counts) as the live registry holds them."""
    out: dict[tuple[str, ...], Any] = {}
    names = inst.label_names
    for family in live.registry.collect():
        if family.name != inst.prometheus_name:
            continue
        cumulative: dict[tuple[str, ...], list[float]] = {}
        for s in family.samples:
            key = tuple(s.labels.get(n, "") for n in names)
            if s.name.endswith("_bucket"):
                cumulative.setdefault(key, []).append(s.value)
            elif s.name.endswith("_count"):
                out.setdefault(key, {})["count"] = int(s.value)
            elif s.name.endswith("_sum"):
                out.setdefault(key, {})["sum"] = s.value
        for key, cum in cumulative.items():
            out[key]["buckets"] = [int(c - p) for c, p in zip(cum, [0.0, *cum[:-1]], strict=True)]
    return out


def test_export_equals_the_live_registry_for_the_same_records(
    plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    db = fresh_database(plain_url)
    run_id = str(uuid.uuid4())
    records = varied_records(run_id, 300)
    live = LiveMetrics()
    live.add_records(records)
    w = StoreWriter(db.url, run_id, WriterConfig(spool_dir=tmp_path / "spool", batch_max_s=0.05))
    w.write(Batch(list(records)))
    w.close()
    with psycopg.connect(db.url, autocommit=True) as conn:
        frame = load_requests(conn, run_id)
    assert len(frame) == 300
    payload = otlp_metrics(frame, {"run_id": run_id, "name": "t", "started_at": None})
    write_otlp(payload, tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == payload
    metrics = {m["name"]: m for m in payload["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    assert set(metrics) == {i.name for i in (genai.REQUESTS, *genai.HISTOGRAMS)}

    def key(point: dict[str, Any], inst: genai.Instrument) -> tuple[str, ...]:
        a = {x["key"]: x["value"]["stringValue"] for x in point["attributes"]}
        return tuple(a.get(n, "") for n in ("run_id", "region", *inst.labels))

    counts = {
        key(p, genai.REQUESTS): int(p["asInt"])
        for p in metrics[genai.REQUESTS.name]["sum"]["dataPoints"]
    }
    expected: dict[tuple[str, ...], int] = {}
    for r in records:
        outcome_key = (run_id, r.region, str(r.outcome))
        expected[outcome_key] = expected.get(outcome_key, 0) + 1
    assert counts == expected
    assert {k[2] for k in counts} == {"ok", "http_error", "timeout", "stream_error"}
    for inst in genai.HISTOGRAMS:
        want = registry_points(live, inst)
        got = {
            key(p, inst): {
                "count": int(p["count"]),
                "sum": p["sum"],
                "buckets": [int(c) for c in p["bucketCounts"]],
            }
            for p in metrics[inst.name]["histogram"]["dataPoints"]
        }
        assert set(got) == set(want), inst.name
        for labels, g in got.items():
            w = want[labels]
            assert g["count"] == w["count"] and g["buckets"] == w["buckets"], (inst, labels)
            assert math.isclose(g["sum"], w["sum"], rel_tol=1e-9), (inst, labels)
    # a TTFT exactly on a bound (0.1 s) lies in the bucket that bound closes: (0.08 s, 0.1 s]
    ttfts_ns = [(r.first_token_ns or 0) - (r.sent_ns or 0) for r in records if r.ok]
    assert ttfts_ns.count(100 * MS) > 0
    inside = sum(1 for t in ttfts_ns if 80 * MS < t <= 100 * MS)
    idx = genai.TTFT.buckets.index(0.1)
    ttft = registry_points(live, genai.TTFT)
    assert sum(v["buckets"][idx] for v in ttft.values()) == inside


class _Refuse(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(415)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_refused_or_unreachable_push_is_one_error(refusing_endpoint: str) -> None:
    payload = otlp_metrics(pd.DataFrame(columns=["run_id", "region", "outcome"]), {"run_id": "r"})
    with pytest.raises(PushError, match="HTTP 415"):
        push_otlp(payload, refusing_endpoint)
    closed = f"http://127.0.0.1:{free_port()}/v1/metrics"
    with pytest.raises(PushError, match=f"OTLP push to {closed}: ConnectError"):
        push_otlp(payload, closed, timeout_s=2)
