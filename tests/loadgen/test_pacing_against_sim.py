"""Pacing against a simulated provider's rate limit (sim preset `hosted`: 20 requests/s, burst
20): offered 30 requests/s, unpaced the run collects 429s (each a record, with Retry-After);
paced at 20/s x 0.9 headroom it gets no 429 beyond the first, and the records show the wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import start_sim
from workers.local import run_local

# serial: a paced rate against the sim's rate budget is a rate-accuracy measurement
pytestmark = [pytest.mark.integration, pytest.mark.serial]


@pytest.fixture
def store_kind() -> str:
    """Pacing is the sender's rule, not the store's: these runs go to the embedded store only
    (every store path has its own tests), which halves this serial module's time."""
    return "plain"


RELAXED = {
    "max_loop_lag_p99_ms": 10_000.0,
    "max_dispatch_delay_p99_ms": 10_000.0,
    "max_cpu_percent": 10_000.0,
}


def _spec(
    base_url: str, pacing: dict[str, object], target: dict[str, object] | None = None
) -> object:
    return spec_from_dict(
        {
            "name": "paced",
            "target": target or {"api": "openai-chat", "base_url": base_url, "model": "m"},
            "workload": {"prompt_tokens": 16, "output_tokens": 8},
            "load": {"rate": [30.0], "arrival": "constant", "duration_s": 4.0},
            "pacing": pacing,
            "validity": RELAXED,
        }
    )


def test_pacing_keeps_under_the_providers_limit(store_url: str, tmp_path: Path) -> None:
    with start_sim(["--preset", "hosted"], tmp_path) as sim:
        unpaced = run_local(_spec(sim.base_url, {}), database_url=store_url).run_id  # type: ignore[arg-type]
        paced = run_local(
            _spec(sim.base_url, {"enabled": True, "requests_per_minute": 1200}),  # type: ignore[arg-type]
            database_url=store_url,
        ).run_id
    with psycopg.connect(store_url) as conn:

        def counts(rid: str) -> tuple[int, int, int, float]:
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE http_status = 429), "
                "count(*) FILTER (WHERE http_status = 429 AND retry_after_s IS NOT NULL), "
                "COALESCE(max(sent_ns) / 1e9, 0) FROM requests WHERE run_id = %s",
                (rid,),
            ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1]), int(row[2]), float(row[3])

        n_u, r429_u, ra_u, _ = counts(unpaced)
        n_p, r429_p, _, late_p = counts(paced)
    assert n_u == n_p == 120  # every scheduled request is a record, paced or not
    assert r429_u >= 20 and ra_u == r429_u  # 30/s into 20/s: 429s, each with its Retry-After
    assert r429_p <= 1
    # 120 requests at 18/s take 6.7 s to send: the last waited about 2.7 s past its schedule
    assert late_p > 2.0


def test_retries_are_separate_attempts_on_the_original_schedule(
    store_url: str, tmp_path: Path
) -> None:
    from loadgen.results.records import make_request_id

    with start_sim(["--preset", "hosted"], tmp_path) as sim:
        spec = _spec(sim.base_url, {"retries": 3})
        run = run_local(spec, database_url=store_url)  # type: ignore[arg-type]
    assert run.status == "completed" and run.requests_scheduled == 120
    rid = run.run_id
    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT request_id::text, shard_id, idx, attempt, scheduled_at, http_status, sent_ns "
            "FROM requests WHERE run_id = %s ORDER BY idx, attempt",
            (rid,),
        ).fetchall()
    first = {(r[1], r[2]): r for r in rows if r[3] == 0}
    retries = [r for r in rows if r[3] > 0]
    assert len(first) == 120  # one first attempt per scheduled request
    assert retries, "30/s into 20/s: some 429s were retried"
    for req_id, shard, idx, attempt, sched, _status, sent in retries:
        assert req_id == make_request_id(rid, shard, idx, attempt)
        prev = next(r for r in rows if (r[1], r[2], r[3]) == (shard, idx, attempt - 1))
        assert prev[5] == 429  # only a 429 is retried
        assert sched == first[(shard, idx)][4]  # tied to the original schedule
        assert sent > prev[6]  # sent later, measured from that schedule
    # a retried request's last attempt is its answer: at most 3 retries, most end ok
    last = {(r[1], r[2]): r for r in rows}
    assert all(r[3] <= 3 for r in last.values())
    assert sum(r[5] == 200 for r in last.values()) > sum(r[5] == 200 for r in first.values())


def _sends(conn: psycopg.Connection[tuple[Any, ...]], rid: str) -> list[tuple[int, float, float]]:
    """(status, scheduled s, sent s) per first attempt, seconds from the run's first schedule."""
    rows = conn.execute(
        "SELECT http_status, extract(epoch FROM scheduled_at)::float8, sent_ns "
        "FROM requests WHERE run_id = %s AND attempt = 0 ORDER BY scheduled_at",
        (rid,),
    ).fetchall()
    t0 = float(rows[0][1])
    return [(int(s), float(at) - t0, float(at) - t0 + int(sent) / 1e9) for s, at, sent in rows]


@pytest.mark.parametrize(
    "pacing",
    [
        {"enabled": True},  # no limit named: the advertised 1200/min x 0.9 paces it
        {"enabled": True, "requests_per_minute": 6000},  # named too high: the remaining gate
        {"enabled": True, "preset": "together"},  # a hosted preset without published limits
    ],
    ids=["advertised-limit", "remaining-gate", "hosted-preset"],
)
def test_advertised_limits_keep_the_run_under_them(
    store_url: str, tmp_path: Path, pacing: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sim's `hosted` preset advertises x-ratelimit-* (1200 requests/min, remaining,
    reset); unpaced, 30/s into it collects many 429s (the first test)."""
    pacing = dict(pacing)
    preset = pacing.pop("preset", None)
    with start_sim(["--preset", "hosted"], tmp_path) as sim:
        target = None
        if preset is not None:  # a hosted preset that publishes no limit, aimed at the sim
            monkeypatch.setenv("PEAKLOAD_TEST_DUMMY_KEY", "not-a-key")
            target = {
                "preset": preset,
                "base_url": sim.base_url,
                "model": "openai/gpt-oss-120b",
                "api_key_env": "PEAKLOAD_TEST_DUMMY_KEY",
            }
        spec = _spec(sim.base_url, pacing, target)
        rid = run_local(spec, database_url=store_url).run_id  # type: ignore[arg-type]
    with psycopg.connect(store_url) as conn:
        sends = _sends(conn, rid)
    assert len(sends) == 120
    statuses = [s for s, _, _ in sends]
    assert statuses.count(429) <= 1, statuses  # none, or the first at most
    # the schedule is the spec's (30/s over 4 s); the sends are the provider's rate
    sched = [at for _, at, _ in sends]
    assert sched[-1] == pytest.approx(119 / 30, abs=0.05)
    sent = sorted(t for _, _, t in sends)
    send_rate = (len(sent) - 1) / (sent[-1] - sent[0])
    if "requests_per_minute" not in pacing:
        assert 16.0 < send_rate < 18.5  # 1200/min x 0.9 = 18/s, never the offered 30/s
    else:  # within the provider's bucket: at most its burst of 20 plus 20/s since the first
        assert len(sent) <= 20 + 20 * (sent[-1] - sent[0]) + 1
    late = [t - at for _, at, t in sends]
    assert max(late) > 1.5  # the wait shows on the records: sent well after the schedule


# The token budget binds: the sim's `hosted` preset with a tokens bucket of 1000/s (advertised as
# 60000/min, burst one second's worth) beside its 20 requests/s; 80 prompt + 120 max_tokens =
# 200 tokens a request, offered 10/s = 2000 tokens/s (half the request limit, twice the token one).
TOKEN_LIMIT_PER_S = 1000.0
TOKENS_PER_REQUEST = 80 + 120
TOKEN_BOUND_REQUESTS = 30  # 10/s for 3 s


def _token_bound_spec(base_url: str, pacing: dict[str, object]) -> object:
    return spec_from_dict(
        {
            "name": "token-paced",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "m"},
            "workload": {"prompt_tokens": 80, "output_tokens": 120},
            "load": {"rate": [10.0], "arrival": "constant", "duration_s": 3.0},
            "pacing": pacing,
            "validity": RELAXED,
        }
    )


def _charged(conn: psycopg.Connection[tuple[Any, ...]], rid: str) -> list[tuple[int, float, int]]:
    """(status, sent s from the first send, prompt + max_tokens) per attempt, in send order."""
    rows = conn.execute(
        "SELECT http_status, extract(epoch FROM scheduled_at)::float8 + sent_ns / 1e9, "
        "prompt_tokens + max_tokens FROM requests WHERE run_id = %s",
        (rid,),
    ).fetchall()
    sent = sorted((float(at), int(status), int(tokens)) for status, at, tokens in rows)
    t0 = sent[0][0]
    return [(status, at - t0, tokens) for at, status, tokens in sent]


@pytest.mark.parametrize(
    "pacing",
    [
        {"enabled": True},  # no limit named: the advertised tokens/min x 0.9 paces it
        {"enabled": True, "tokens_per_minute": 60_000},  # the published limit, named
    ],
    ids=["advertised-tokens", "named-tokens"],
)
def test_token_pacing_keeps_under_the_providers_token_limit(
    store_url: str, tmp_path: Path, pacing: dict[str, object]
) -> None:
    args = ["--preset", "hosted", "--rate-limit-tps", f"{TOKEN_LIMIT_PER_S:g}"]
    with start_sim(args, tmp_path) as sim:
        unpaced = run_local(_token_bound_spec(sim.base_url, {}), database_url=store_url).run_id  # type: ignore[arg-type]
        paced = run_local(_token_bound_spec(sim.base_url, pacing), database_url=store_url).run_id  # type: ignore[arg-type]
    with psycopg.connect(store_url) as conn:
        unpaced_rows = _charged(conn, unpaced)
        paced_rows = _charged(conn, paced)
    assert len(unpaced_rows) == len(paced_rows) == TOKEN_BOUND_REQUESTS
    assert all(tokens == TOKENS_PER_REQUEST for _, _, tokens in paced_rows)
    # the control: 6000 tokens in 3 s into a 1000 burst + 1000/s bucket: about a third refused
    assert sum(s == 429 for s, _, _ in unpaced_rows) >= 5
    statuses = [s for s, _, _ in paced_rows]
    assert statuses.count(429) <= 1 and 429 not in statuses[1:], statuses
    # the achieved token rate, as the provider counts it (prompt + max_tokens at send): the
    # tokens sent after the first, over the time since it, within the limit x 0.9 headroom
    span_s = paced_rows[-1][1]
    rate_per_s = sum(tokens for _, _, tokens in paced_rows[1:]) / span_s
    limit_per_s = TOKEN_LIMIT_PER_S * 0.9
    assert rate_per_s <= limit_per_s * 1.01, (rate_per_s, limit_per_s)
    assert rate_per_s > limit_per_s * 0.8, (rate_per_s, limit_per_s)  # paced, not stalled
