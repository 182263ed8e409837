"""Locust mode's parts that need no Locust: the wire, the spec of a Locust test, the metrics
Locust is told (the same definitions as analysis.metrics), and the engine served over a socket
pair against the simulated engine: one record per request, levels and phases as told."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.metrics import ChunkArrays, e2e_ms, itl_per_token_ms, tpot_ms, ttft_ms
from loadgen.engine.plan import ShardPlan, Sink
from loadgen.errors import SpecError
from loadgen.locust.engine import ShardEnd, request_metrics, serve
from loadgen.locust.spec import locust_spec
from loadgen.locust.wire import HEADER, WireError, frame_length, pack, unpack
from loadgen.results.records import Outcome, Phase, RequestRecord
from tests.support.memsink import MemorySink
from tests.support.sim import SimProcess


def _record(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = dict(
        request_id="r", run_id="run", shard_id="s", region="local", level=0, index=0,
        scheduled_at_ns=0, sent_ns=1_000_000, first_token_ns=51_000_000, end_ns=91_000_000,
        output_tokens=6, chunk_offsets_us=[0, 50_000, 60_000, 70_500, 90_000],
        chunk_tokens=[0, 1, 2, 1, 2],
    )  # fmt: skip
    base.update(kw)
    return RequestRecord(**base)


def test_metrics_for_locust_are_analysis_definitions() -> None:
    rec = _record()
    got = request_metrics(rec)
    cols = ("sent_ns", "first_token_ns", "end_ns", "output_tokens")
    df = pd.DataFrame([{k: getattr(rec, k) for k in cols}])
    assert got["kind"] == "ok" and got["tokens"] == 6
    assert got["ttft"] == pytest.approx(ttft_ms(df)[0])
    assert got["tpot"] == pytest.approx(tpot_ms(df)[0])
    assert got["e2e"] == pytest.approx(e2e_ms(df)[0])
    per_token = np.repeat([g for g, _ in got["itl"]], [k for _, k in got["itl"]])
    chunks = ChunkArrays.from_lists([rec.chunk_offsets_us], [rec.chunk_tokens])
    np.testing.assert_allclose(per_token, itl_per_token_ms(chunks))


@pytest.mark.parametrize(
    ("kw", "kind"),
    [
        ({"outcome": Outcome.HTTP_ERROR, "http_status": 429}, "http_429"),
        ({"outcome": Outcome.TIMEOUT, "error_phase": "first_token"}, "timeout:first_token"),
        ({"outcome": Outcome.STREAM_ERROR}, "stream_error"),
        ({"outcome": Outcome.NOT_SENT, "error_phase": "run_ended"}, "not_sent:run_ended"),
    ],
)
def test_failure_kinds_are_analysis_kinds(kw: dict[str, Any], kind: str) -> None:
    assert request_metrics(_record(**kw))["kind"] == kind


def test_wire_round_trip_and_refusals() -> None:
    frame = pack({"op": "req", "id": 3, "messages": None})
    assert frame_length(frame[: HEADER.size]) == len(frame) - HEADER.size
    assert unpack(frame[HEADER.size :]) == {"op": "req", "id": 3, "messages": None}
    with pytest.raises(WireError):
        frame_length(HEADER.pack(1 << 31))
    with pytest.raises(WireError):
        unpack(b"[1, 2]")
    with pytest.raises(WireError):
        unpack(b"{not json")


def test_spec_from_attributes_host_and_file(tmp_path: Path) -> None:
    attrs = {"name": "chat", "model": "m", "prompt_tokens": 32, "output_tokens": 8}
    spec = locust_spec(None, attrs, "http://127.0.0.1:9/v1", where="ChatUser attributes")
    assert spec.target.base_url == "http://127.0.0.1:9/v1" and spec.name == "chat"
    with pytest.raises(SpecError, match=r"ChatUser attributes.*base_url"):
        locust_spec(None, attrs, None, where="ChatUser attributes")
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "x"\n[target]\napi = "openai-chat"\nbase_url = "http://a:1/v1"\nmodel = "m"\n'
        "[workload]\noutput_tokens = 4\n"
    )
    spec = locust_spec(path, {}, "http://b:2/v1", where="-")
    assert spec.target.base_url == "http://b:2/v1" and spec.workload.output_tokens.value == 4  # type: ignore[union-attr]
    path.write_text(path.read_text() + "surprise = 1\n")
    with pytest.raises(SpecError, match=r"s\.toml.*surprise: unknown field"):
        locust_spec(path, {}, None, where="-")


class _Store:
    """A ShardStore in memory."""

    def __init__(self) -> None:
        self.sink = MemorySink()
        self.ended: list[ShardEnd] = []

    def begin(self, plan: ShardPlan) -> Sink:
        return self.sink

    def end(self, plan: ShardPlan, result: ShardEnd) -> None:
        self.ended.append(result)


async def _talk(sock: socket.socket, base_url: str) -> list[dict[str, Any]]:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    got: list[dict[str, Any]] = []

    async def read() -> dict[str, Any]:
        header = await reader.readexactly(HEADER.size)
        msg = unpack(await reader.readexactly(frame_length(header)))
        got.append(msg)
        return msg

    assert (await read())["op"] == "ready"
    attrs = {"model": "m", "prompt_tokens": 8, "output_tokens": 4}
    spec = locust_spec(None, attrs, base_url, where="-").public_dict()
    level0 = {"index": 0, "users": 2, "steady": False}
    start = {"run_id": "run-1", "shard_id": "locust", "spec": spec, "level": level0}
    writer.write(pack({"op": "start", **start}))
    assert (await read())["op"] == "started"
    writer.write(pack({"op": "req", "id": 0}))
    writer.write(pack({"op": "level", "index": 0, "users": 2, "steady": True}))
    hello = [{"role": "user", "content": "hi"}]
    writer.write(pack({"op": "req", "id": 1, "messages": hello, "session": [7, 0]}))
    replies = [await read(), await read()]
    writer.write(pack({"op": "level", "index": 1, "users": 3, "steady": False}))
    writer.write(pack({"op": "req", "id": 2, "max_tokens": 2}))
    replies.append(await read())
    writer.write(pack({"op": "req", "id": 3, "max_tokens": 2000}))  # in flight at the stop
    writer.write(pack({"op": "stop"}))
    while (await read())["op"] != "stopped":
        pass
    writer.close()
    return got


@pytest.mark.integration
@pytest.mark.serial  # levels and phases of a timed run: the cores alone
def test_engine_one_record_per_request_with_levels_and_phases(sim: SimProcess) -> None:
    ours, theirs = socket.socketpair()
    store = _Store()

    async def main() -> list[dict[str, Any]]:
        server = asyncio.create_task(serve(theirs, store))
        got = await _talk(ours, sim.base_url)
        await asyncio.wait_for(server, 30)
        return got

    got = asyncio.run(main())
    done = {m["id"]: m for m in got if m["op"] == "done"}
    assert sorted(done) == [0, 1, 2] and all(m["kind"] == "ok" for m in done.values())
    assert done[1]["text"] and "text" not in done[0]  # a session turn returns its answer
    stopped = next(m for m in got if m["op"] == "stopped")
    recs = {r.index: r for r in store.sink.records}
    assert stopped["requests_scheduled"] == len(recs) == 4 and store.sink.closed
    assert [recs[i].outcome for i in range(3)] == [Outcome.OK] * 3
    # in flight at the stop (cancelled), or stopped before it could start (not sent)
    assert recs[3].outcome in (Outcome.CANCELLED, Outcome.NOT_SENT)
    assert [(recs[i].level, recs[i].phase) for i in range(3)] == [
        (0, Phase.WARMUP),  # before the ramp ended
        (0, Phase.STEADY),
        (1, Phase.WARMUP),
    ]
    assert (recs[1].session_id, recs[1].turn) == (7, 0) and recs[2].output_tokens == 2
    assert recs[1].prompt_tokens is None and recs[0].prompt_tokens == 8  # own prompt: unplanned
    assert all(len(recs[i].chunk_offsets_us) == recs[i].output_tokens for i in range(3))
    assert store.ended and store.ended[0].status == "completed" and store.sink.ticks
