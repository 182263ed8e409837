"""Sim configuration layering and validation, fault rules and draws, and the HTTP parser."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from loadgen.errors import SpecError
from loadgen.sim.config import PRESETS, FaultKind, SimConfig, load_config, parse_fault_rule
from loadgen.sim.faults import RateBudget, choose_faults, parse_fault_header
from loadgen.sim.http import HttpParseError, RequestParser
from loadgen.sim.text import BadRequest


def test_presets_and_defaults() -> None:
    for name in PRESETS:
        assert load_config(name).model_dump()  # every preset validates
    cfg = load_config()
    assert (cfg.mode, cfg.ttft_ms, cfg.itl_ms) == ("fixed", 50.0, 10.0)
    hosted = load_config("hosted")
    assert hosted.mode == "batching" and hosted.rate_limit_rps > 0


def test_file_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "sim.json"
    f.write_text(
        json.dumps(
            {
                "preset": "small-gpu",
                "slots": 4,
                "faults": {"reset": {"rate": 0.1, "arg": 5}, "429": 0.2},
            }
        )
    )
    cfg = load_config(None, f, {"seed": 3, "faults": [parse_fault_rule("503=0.05")], "slots": None})
    assert cfg.mode == "batching" and cfg.slots == 4 and cfg.seed == 3
    assert cfg.decode_step_ms == PRESETS["small-gpu"]["decode_step_ms"]
    kinds = {r.kind: (r.rate, r.effective_arg) for r in cfg.faults}
    assert kinds == {
        FaultKind.RESET: (0.1, 5),
        FaultKind.HTTP_429: (0.2, 1.0),
        FaultKind.HTTP_503: (0.05, None),
    }


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"slots": 0}', "slots"),
        ('{"slotz": 3}', "slotz"),
        ('{"faults": {"429": 0.7, "503": 0.6}}', "add up to 1.3"),
        ('{"faults": {"gremlins": 0.1}}', "unknown fault kind 'gremlins'"),
        ('{"stall_every_s": 5, "stall_for_s": 5}', "stall_for_s must be shorter"),
        ('{"preset": "tpu"}', "unknown preset 'tpu'"),
        ('{\n  "slots": 4,,\n}', "line 2"),
        ("[1, 2]", "top level must be a JSON object"),
    ],
)
def test_bad_config_file_names_the_problem(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(SpecError) as e:
        load_config(None, f)
    assert needle in str(e.value) and str(f) in str(e.value)


def test_fault_rules() -> None:
    r = parse_fault_rule("reset:5=0.01")
    assert (r.kind, r.arg, r.rate) == (FaultKind.RESET, 5.0, 0.01)
    assert parse_fault_rule("429=0.5").kind is FaultKind.HTTP_429
    for bad, needle in [
        ("bogus=0.1", "unknown fault kind"),
        ("429", "KIND[:ARG]=RATE"),
        ("503=2", "rate"),
        ("reset:x=0.1", "numbers"),
    ]:
        with pytest.raises(SpecError, match="--fault") as e:
            parse_fault_rule(bad)
        assert needle in str(e.value)


def test_fault_header() -> None:
    assert parse_fault_header("multi_token:3, utf8_split") == {
        FaultKind.MULTI_TOKEN: 3.0,
        FaultKind.UTF8_SPLIT: None,
    }
    assert parse_fault_header("503") == {FaultKind.HTTP_503: None}
    with pytest.raises(BadRequest, match="unknown fault kind"):
        parse_fault_header("nope")
    with pytest.raises(BadRequest, match=">= 0"):
        parse_fault_header("reset:-1")


def test_fault_draws_are_seeded_by_request_id() -> None:
    cfg = load_config(
        None, None, {"faults": [parse_fault_rule("429=0.2"), parse_fault_rule("503=0.1")]}
    )
    ids = [f"req-{i}" for i in range(4000)]
    draws = [tuple(choose_faults(cfg, rid, n, None)) for n, rid in enumerate(ids, 1)]
    # the arrival number plays no part: the same ids in another order draw the same faults
    again = [tuple(choose_faults(cfg, rid, 1, None)) for rid in reversed(ids)][::-1]
    assert draws == again
    counts = Counter(d[0] if d else None for d in draws)
    assert 700 < counts[FaultKind.HTTP_429] < 900  # 20 % of 4000, binomial sd ~25
    assert 320 < counts[FaultKind.HTTP_503] < 480
    other = cfg.model_copy(update={"seed": 1})
    assert draws != [tuple(choose_faults(other, rid, 1, None)) for rid in ids]
    assert choose_faults(cfg, "x", 1, "reset:2") == {FaultKind.RESET: 2.0}  # the header wins


def test_fault_draws_by_arrival_ignore_the_request_id() -> None:
    rules = [parse_fault_rule("429=0.2"), parse_fault_rule("reset=0.1")]
    cfg = load_config(None, None, {"faults": rules, "fault_draw": "arrival"})
    draws = [tuple(choose_faults(cfg, f"id-{n}", n, None)) for n in range(1, 4001)]
    # other ids, the same arrival numbers: the same faults
    assert draws == [tuple(choose_faults(cfg, f"other-{n}", n, None)) for n in range(1, 4001)]
    counts = Counter(d[0] if d else None for d in draws)
    assert 700 < counts[FaultKind.HTTP_429] < 900 and 320 < counts[FaultKind.RESET] < 480
    by_id = cfg.model_copy(update={"fault_draw": "request"})
    assert draws != [tuple(choose_faults(by_id, f"id-{n}", n, None)) for n in range(1, 4001)]


def test_rate_budget() -> None:
    t = 10**12
    b = RateBudget(rps=2.0, burst=2.0, now_ns=t)
    assert b.take(t) is None and b.take(t) is None
    wait = b.take(t)
    assert wait is not None and 0.49 < wait <= 0.5
    assert b.take(t + 500_000_000) is None  # half a second refills one request


def test_parser_pipelining_and_timestamps() -> None:
    p = RequestParser()
    req = b"POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 4\r\nX-A: b\r\n\r\n"
    p.feed(req + b"ab", 100)
    assert not p.ready
    p.feed(b"cd" + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", 200)
    first, second = p.ready
    assert (first.path, first.body, first.headers["x-a"]) == ("/v1/completions", b"abcd", "b")
    assert (first.headers_ns, first.received_ns) == (100, 200)
    assert first.keep_alive and not second.keep_alive


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"BAD\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    ],
)
def test_parser_rejects(raw: bytes, status: int) -> None:
    with pytest.raises(HttpParseError) as e:
        RequestParser().feed(raw, 0)
    assert e.value.status == status


def test_preset_constructor() -> None:
    cfg = SimConfig.preset("fixed", itl_ms=20)
    assert (cfg.ttft_ms, cfg.itl_ms) == (50.0, 20.0)
    with pytest.raises(SpecError, match="unknown preset"):
        SimConfig.preset("nope")
