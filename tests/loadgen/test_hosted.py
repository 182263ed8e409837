"""Hosted-provider manners without a network: the pre-run estimate by hand, a hosted preset
refusing an over-limit spec (unless confirmed or paced), max_cost_usd, and the pacer's spacing
and Retry-After gate."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
from typing import Any

import pytest

from loadgen.checks import hosted
from loadgen.errors import SpecError
from loadgen.runspec.pacing import Pacer
from loadgen.runspec.spec import RunSpec, spec_from_dict


def groq(load: dict[str, Any], **extra: Any) -> RunSpec:
    return spec_from_dict(
        {
            "name": "g",
            "target": {
                "preset": "groq",
                "model": "openai/gpt-oss-120b",
                "base_url": "http://127.0.0.1:9/v1",
            },
            "workload": {
                "prompt_tokens": 1000,
                "output_tokens": {"dist": "uniform", "min": 100, "max": 300},
            },
            "load": load,
            **extra,
        }
    )


def test_estimate_by_hand() -> None:
    est = hosted.estimate(groq({"rate": [0.2, 0.4], "duration_s": 60}))
    # 0.2 x 60 + 0.4 x 60 = 36 requests; 1,000 in and 200 (mean of 100..300) out each
    assert est.requests == pytest.approx(36)
    assert (est.input_tokens, est.output_tokens) == (36_000, 7_200)
    assert est.peak_requests_per_minute == pytest.approx(24)
    # groq gpt-oss-120b, 2026-10-19: 36,000 x 0.15 / 1e6 + 7,200 x 0.60 / 1e6 = 0.00972 USD
    assert est.cost_usd == pytest.approx(0.00972)
    assert "0.0097" in est.lines()[0]


def test_hosted_preset_refuses_an_over_limit_spec() -> None:
    over = groq({"rate": [5.0], "duration_s": 300})  # 300/min, 1,500 requests
    with pytest.raises(SpecError) as err:
        hosted.guard(over)
    msg = str(err.value)
    assert "300 requests/min exceeds the groq free tier's 30 requests/min" in msg
    assert "1,500 requests exceed the groq free tier's 1000 requests/day" in msg
    assert "confirm_over_limits" in msg
    ok = groq({"rate": [5.0], "duration_s": 300}, cost={"confirm_over_limits": True})
    assert hosted.guard(ok).problems  # confirmed: runs, with its reasons printed
    # pacing answers the per-minute limit, not the daily one
    paced = groq({"rate": [5.0], "duration_s": 100}, pacing={"enabled": True})
    est = hosted.guard(paced)
    assert est.paced[0] == pytest.approx(27.0) and est.paced[1] is None  # 30/min x 0.9
    # a closed loop's rate is unknown before it runs: refused unless paced or confirmed
    with pytest.raises(SpecError, match="unknown before it runs"):
        hosted.guard(groq({"concurrency": [4], "duration_s": 10}))
    assert hosted.check(groq({"rate": [0.2], "duration_s": 60})).problems == []


def test_daily_token_limit() -> None:
    from loadgen.runspec.presets import Limits

    est = hosted.estimate(groq({"rate": [0.2], "duration_s": 600}))  # 120 x 1,200 tokens
    problems = hosted._limit_problems(
        est, Limits(tokens_per_day=100_000, as_of=dt.date(2026, 12, 1), source="t"), False, "p"
    )
    assert problems == ["144,000 tokens exceed the p published tier's 100000 tokens/day"]


def test_max_cost_and_pacing_without_a_limit() -> None:
    with pytest.raises(SpecError, match=r"estimated cost \$0.0097 exceeds max_cost_usd 0.005"):
        hosted.guard(groq({"rate": [0.2, 0.4], "duration_s": 60}, cost={"max_cost_usd": 0.005}))
    unpriced = spec_from_dict(
        {
            "name": "u",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": {"rate": [1.0], "duration_s": 5},
            "pacing": {"enabled": True},
        }
    )
    est = hosted.check(unpriced)  # no limit named: the provider's advertised ones pace it
    assert est.problems == []
    assert "paced to the advertised requests/min, the advertised tokens/min" in est.lines()[-1]


def test_pacer_spaces_sends_and_honours_retry_after() -> None:
    async def go() -> tuple[list[int], int]:
        read: list[int] = []  # the pacer's clock readings: its last in `acquire` is the send's

        def clock() -> int:
            read.append(time.perf_counter_ns())
            return read[-1]

        pacer = Pacer(rpm=600.0, tpm=None, clock=clock)  # one send per 100 ms
        stamps = []
        for _ in range(4):
            await pacer.acquire(10)
            # the instant the pacer released this send, not when this coroutine woke after it
            # (a loaded host may run it a few ms later: a gap of 98.3 ms was seen in CI)
            stamps.append(read[-1])
        pacer.back_off(0.3)
        t0 = time.perf_counter_ns()
        await pacer.acquire(10)
        return stamps, time.perf_counter_ns() - t0

    stamps, gated = asyncio.run(go())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 100_000_000  # never sooner than the limit allows
    assert gated >= 300_000_000  # nothing before Retry-After


def test_pacer_token_allowance() -> None:
    async def go() -> int:
        pacer = Pacer(rpm=None, tpm=60_000.0)  # 1,000 tokens/s
        await pacer.acquire(200)  # the first goes at once and uses 200 ms of allowance
        t0 = time.perf_counter_ns()
        await pacer.acquire(200)
        return time.perf_counter_ns() - t0

    assert asyncio.run(go()) >= 190_000_000
