"""Advertised rate limits: the reset durations providers send, read in one place; only the
rate-limit headers are kept; the pacer holds sends while an advertised budget is spent and
paces at an advertised limit when none is named."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.runspec.pacing import Pacer
from loadgen.runspec.presets import load_preset
from loadgen.sim.faults import format_duration
from loadgen.target import RateLimit
from loadgen.targets.ratelimit import parse_duration, rate_limit_of


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("59.6ms", 0.0596),
        ("2m59.56s", 179.56),
        ("1h2m3s", 3723.0),
        ("250us", 0.00025),
        ("20", 20.0),
        ("0.5", 0.5),
        (" 7s ", 7.0),
        ("0s", 0.0),
    ],
)
def test_reset_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "soon", "-1", "1x", "s", "5m-3s", "nan", "1s2"])
def test_unreadable_resets_are_none(text: str | None) -> None:
    assert parse_duration(text) is None


@pytest.mark.parametrize("seconds", [0.0, 0.0596, 0.5, 1.0, 12.34, 59.99, 360.0, 179.56])
def test_the_sims_format_reads_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.006)


def test_only_rate_limit_headers_are_read() -> None:
    assert rate_limit_of({"content-type": "text/event-stream", "authorization": "Bearer k"}) is None
    rl = rate_limit_of(
        {
            "x-ratelimit-limit-requests": "1200",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "59.6ms",
            "x-ratelimit-limit-tokens": "90000",
            "x-ratelimit-remaining-tokens": "oops",
            "x-ratelimit-reset-tokens": "6m0s",
            "retry-after": "2",
            "set-cookie": "secret=1",
        }
    )
    assert rl is not None and rl.reset_requests_s == pytest.approx(0.0596)
    assert rl == RateLimit(1200.0, 0.0, rl.reset_requests_s, 90000.0, None, 360.0, 2.0)


class FakeClock:
    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


def _due_after(pacer: Pacer, clock: FakeClock, tokens: int = 0) -> float:
    return (pacer.due(clock.ns, tokens) - clock.ns) / 1e9


def test_spent_budget_holds_sends_until_its_reset() -> None:
    clock = FakeClock()
    pacer = Pacer(None, None, clock)
    pacer.observe(RateLimit(remaining_requests=2, reset_requests_s=3.0))

    async def sends(n: int) -> None:
        for _ in range(n):
            await pacer.acquire(0)

    asyncio.run(sends(2))  # two left: both go at once
    assert _due_after(pacer, clock) == pytest.approx(3.0)  # then none until the reset
    clock.ns += 3 * 10**9
    pacer._expire(clock.ns)
    assert _due_after(pacer, clock) == 0.0  # past the reset the budget is full again


def test_tokens_below_the_next_requests_need_hold_it() -> None:
    clock = FakeClock()
    pacer = Pacer(None, None, clock)
    pacer.observe(RateLimit(remaining_tokens=500, reset_tokens_s=1.5))
    assert _due_after(pacer, clock, tokens=400) == 0.0
    assert _due_after(pacer, clock, tokens=600) == pytest.approx(1.5)


def test_advertised_limit_paces_only_where_none_is_named() -> None:
    clock = FakeClock()
    learned = Pacer(None, None, clock, headroom=0.9, share=0.5)
    learned.observe(RateLimit(limit_requests=1200, limit_tokens=60_000))
    assert learned.req_gap_ns == pytest.approx(60e9 / (1200 * 0.45), rel=1e-9)  # 540/min
    assert learned.ns_per_token == pytest.approx(60e9 / 27_000)
    named = Pacer(600.0, None, clock)
    named.observe(RateLimit(limit_requests=1200))
    assert named.req_gap_ns == 100_000_000  # the spec's limit stands


def test_sends_before_the_limit_was_known_are_charged_against_it() -> None:
    """Two 200-token sends, then a response advertises 60,000 tokens/min (1 ms a token) and
    600 requests/min: the next send waits for both, as if the pace had held from the first."""
    clock = FakeClock()
    pacer = Pacer(None, None, clock, headroom=1.0)

    async def sends(n: int) -> None:
        for _ in range(n):
            await pacer.acquire(200)

    asyncio.run(sends(2))
    assert _due_after(pacer, clock, tokens=200) == 0.0  # nothing known yet
    pacer.observe(RateLimit(limit_requests=600, limit_tokens=60_000))
    assert _due_after(pacer, clock, tokens=200) == pytest.approx(0.4)
    late = Pacer(None, None, clock, headroom=1.0)
    asyncio.run(late.acquire(200))
    clock.ns += 61 * 10**9  # a send more than a minute old no longer counts
    asyncio.run(late.acquire(200))
    late.observe(RateLimit(limit_tokens=60_000))
    assert _due_after(late, clock, tokens=200) == pytest.approx(0.2)
    only_requests = Pacer(None, None, clock)
    asyncio.run(only_requests.acquire(0))
    only_requests.observe(RateLimit(limit_requests=600))
    assert _due_after(only_requests, clock) == pytest.approx(0.1 / 0.9)  # 540/min


def test_a_reset_beyond_the_cap_is_not_a_pause_we_take() -> None:
    clock = FakeClock()
    pacer = Pacer(None, None, clock)
    pacer.observe(RateLimit(remaining_requests=0, reset_requests_s=86_400.0))  # a daily limit
    assert _due_after(pacer, clock) == pytest.approx(120.0)


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_the_simulated_provider_advertises_and_the_target_reads_it(transport: str) -> None:
    """A sim with 1 request/s (burst 2) and 600 tokens/s advertises its budgets on every answer,
    429 included; the HEADERS event carries them, and nothing else of the head."""
    from loadgen.errors import HttpStatusError
    from loadgen.sim.config import SimConfig
    from loadgen.sim.server import serve
    from loadgen.target import EventKind
    from tests.loadgen.targets.helpers import collect, make_target, request

    cfg = SimConfig.preset(
        "fixed",
        ttft_ms=1.0,
        itl_ms=1.0,
        rate_limit_rps=1.0,
        rate_limit_burst=2.0,
        rate_limit_tokens_per_s=600.0,
        rate_limit_headers=True,
    )

    async def go() -> list[tuple[int, RateLimit | None, BaseException | None]]:
        stop = asyncio.Event()
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        server = asyncio.create_task(serve(cfg, "127.0.0.1", 0, ready.set_result, stop=stop))
        url = await ready
        target = make_target(url, transport)
        out = []
        try:
            for i in range(3):
                events, exc = await collect(target, request(f"r{i}"))
                head = next(e for e in events if e.kind is EventKind.HEADERS)
                out.append((head.status, head.ratelimit, exc))
        finally:
            await target.aclose()
            stop.set()
            await server
        return out

    (s1, rl1, e1), (s2, rl2, _), (s3, rl3, e3) = asyncio.run(go())
    assert (s1, s2, s3) == (200, 200, 429) and e1 is None
    assert rl1 is not None and rl2 is not None and rl3 is not None
    assert rl1.limit_requests == 60.0 and rl1.limit_tokens == 36_000.0  # per minute
    assert rl1.remaining_requests == 1.0 and rl2.remaining_requests == 0.0
    prompt = rl1.limit_tokens / 60 - (rl1.remaining_tokens or 0) - 8  # prompt + max_tokens
    assert prompt >= 1
    assert rl2.reset_requests_s is not None and 1.5 < rl2.reset_requests_s <= 2.0  # until full
    assert rl3.remaining_requests == 0.0 and rl3.retry_after_s == 1.0
    assert isinstance(e3, HttpStatusError) and e3.retry_after_s == 1.0


def test_a_per_day_request_limit_is_a_budget_not_a_pace() -> None:
    """Groq's `x-ratelimit-limit-requests` counts requests per day (its preset's
    `[ratelimit_headers]`): 14,400 a day must not pace sends at 14,400 a minute, nor at a tenth
    of one a minute; the per-minute token limit beside it still paces, and the day's
    remaining still holds sends once spent."""
    clock = FakeClock()
    windows = load_preset("groq").ratelimit_headers
    assert windows is not None
    assert (windows.requests_window_s, windows.tokens_window_s) == (86_400, 60)
    pacer = Pacer(
        None,
        None,
        clock,
        headroom=1.0,
        requests_window_s=windows.requests_window_s,
        tokens_window_s=windows.tokens_window_s,
    )
    pacer.observe(RateLimit(limit_requests=14_400, remaining_requests=14_399, limit_tokens=6_000))
    assert pacer.req_gap_ns == 0  # no pace from a daily budget
    assert pacer.ns_per_token == pytest.approx(60e9 / 6_000)  # 6,000 tokens a minute
    pacer.observe(RateLimit(remaining_requests=0, reset_requests_s=7.5))
    assert _due_after(pacer, clock) == pytest.approx(7.5)  # the day's budget is spent
    # read per minute (the old reading), the same header would have paced at 240 a second
    per_minute = Pacer(None, None, clock, headroom=1.0)
    per_minute.observe(RateLimit(limit_requests=14_400))
    assert per_minute.req_gap_ns == pytest.approx(60e9 / 14_400)


def test_a_per_second_window_paces_at_its_own_rate() -> None:
    clock = FakeClock()
    pacer = Pacer(None, None, clock, headroom=1.0, requests_window_s=1, tokens_window_s=1)
    pacer.observe(RateLimit(limit_requests=10, limit_tokens=1_000))
    assert pacer.req_gap_ns == 100_000_000  # 10 a second
    assert pacer.ns_per_token == pytest.approx(1e6)  # 1,000 tokens a second


def test_the_run_pacer_takes_its_presets_windows() -> None:
    from loadgen.runspec.spec import spec_from_dict
    from loadgen.targets.factory import paced_by

    spec = spec_from_dict(
        {
            "name": "p",
            "target": {"preset": "groq", "model": "openai/gpt-oss-20b"},
            "load": {"concurrency": [1], "duration_s": 1},
            "pacing": {"enabled": True},
        }
    )
    pacer = paced_by(spec, 1.0)
    assert pacer is not None
    assert (pacer.requests_window_s, pacer.tokens_window_s) == (86_400, 60)
    assert pacer.req_gap_ns == int(60e9 / (30 * 0.9))  # the published 30 a minute paces
