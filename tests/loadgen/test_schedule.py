"""Schedules are pure: seeded, absolute offsets, exact counts, correct rates and shapes."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.engine.schedule import open_loop_offsets, saturation_levels, trace_share


def offsets(*args: object) -> np.ndarray:
    return np.fromiter(open_loop_offsets(*args), dtype=float)  # type: ignore[arg-type]


def test_constant_rate_is_exact_and_starts_at_zero() -> None:
    o = offsets("constant", 1.0, 10.0, 10.0, 3.0, 0, 10**9)
    assert len(o) == 30
    assert o[0] == 0.0
    assert np.allclose(np.diff(o), 0.1)


def test_poisson_200_per_s_for_60_s_is_within_one_percent_and_exponential() -> None:
    o = offsets("poisson", 1.0, 200.0, 200.0, 60.0, 1234, 10**9)
    assert abs(len(o) - 12_000) <= 120  # M2: within ±1 %
    gaps = np.diff(o)
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 200, rel=0.05)  # exponential: sd = mean
    assert np.all(o < 60.0) and np.all(np.diff(o) >= 0)


def test_seeded_schedules_repeat_and_differ_by_seed() -> None:
    a = offsets("poisson", 1.0, 50.0, 50.0, 10.0, 7, 10**9)
    b = offsets("poisson", 1.0, 50.0, 50.0, 10.0, 7, 10**9)
    c = offsets("poisson", 1.0, 50.0, 50.0, 10.0, 8, 10**9)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:10], c[:10])


def test_gamma_burstiness_changes_dispersion_not_rate() -> None:
    bursty = offsets("gamma", 0.25, 100.0, 100.0, 100.0, 3, 10**9)
    smooth = offsets("gamma", 4.0, 100.0, 100.0, 100.0, 3, 10**9)
    for o in (bursty, smooth):
        assert abs(len(o) - 10_000) < 400
    cv_bursty = np.diff(bursty).std() / np.diff(bursty).mean()
    cv_smooth = np.diff(smooth).std() / np.diff(smooth).mean()
    assert cv_bursty == pytest.approx(2.0, rel=0.1)  # 1/sqrt(0.25)
    assert cv_smooth == pytest.approx(0.5, rel=0.1)  # 1/sqrt(4)


def test_linear_ramp_sends_the_integral_of_its_rate() -> None:
    o = offsets("constant", 1.0, 0.0, 100.0, 10.0, 0, 10**9)
    assert len(o) == 500  # ∫0..10 10 t dt
    first_half = np.count_nonzero(o < 5.0)
    assert first_half == 125  # a quarter of the requests in the first half


def test_max_requests_bounds_the_schedule() -> None:
    assert len(offsets("poisson", 1.0, 1000.0, 1000.0, 60.0, 0, 777)) == 777


def test_long_schedules_cross_generation_blocks_seamlessly() -> None:
    o = offsets("constant", 1.0, 1000.0, 1000.0, 10.0, 0, 10**9)
    assert len(o) == 10_000
    assert np.allclose(np.diff(o), 0.001)


def test_trace_shares_partition_the_trace() -> None:
    parts = [trace_share(1000, 5, lo, hi) for lo, hi in ((0, 0.5), (0.5, 0.8), (0.8, 1.0))]
    joined = np.sort(np.concatenate(parts))
    assert np.array_equal(joined, np.arange(1000))
    assert abs(len(parts[0]) - 500) < 60


def test_saturation_search_doubles_then_bisects() -> None:
    hist: list[tuple[float, bool]] = []
    truth = 11.0  # levels up to 11 req/s meet the SLOs
    while (v := saturation_levels(1.0, 64.0, hist, 12, 0.1)) is not None:
        hist.append((v, v <= truth))
    tried = [v for v, _ in hist]
    assert tried[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    best = max(v for v, ok in hist if ok)
    worst = min(v for v, ok in hist if not ok)
    assert best <= truth < worst
    assert (worst - best) / worst <= 0.1


def _shard_offsets(spec: dict[str, object]) -> list[np.ndarray]:
    """Every shard's send offsets for the spec's one open-loop level, as the runner makes them
    (the planner's fractions and seeds, each shard's fraction's low end as its phase)."""
    from loadgen.runspec.spec import spec_from_dict
    from workers.planner import plan_run, with_fraction_offsets

    run = spec_from_dict(spec)
    out = []
    for p in with_fraction_offsets(plan_run(run, "phase-test")):
        rate = run.load.rate[0] * p.fraction  # type: ignore[index]
        gen = open_loop_offsets(
            run.load.arrival, run.load.burstiness, rate, rate, run.load.duration_s, p.seed,
            p.max_requests, phase=float(p.extra["fraction_lo"]),
        )  # fmt: skip
        out.append(np.fromiter(gen, dtype=float))
    return out


def _spec(arrival: str, regions: list[dict[str, object]]) -> dict[str, object]:
    return {
        "name": "phase",
        "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "workload": {"prompt_tokens": 8, "output_tokens": 8},
        "load": {"rate": [64.0], "arrival": arrival, "duration_s": 10, "seed": 5},
        "regions": regions,
    }


def test_equal_shards_of_a_constant_rate_interleave_into_the_run_s_one_lattice() -> None:
    # 64 shards over 10 regions, each at 1 request/s: together one request every 1/64 s, not
    # 64 at once every second
    regions = [{"name": f"r{i}", "share": (7 if i < 4 else 6) / 64, "workers": 7 if i < 4 else 6}
               for i in range(10)]  # fmt: skip
    shards = _shard_offsets(_spec("constant", regions))
    assert len(shards) == 64
    sent = np.sort(np.concatenate(shards))
    assert sent.size == 640
    np.testing.assert_allclose(sent, np.arange(640) / 64.0, atol=1e-9)


def test_shards_of_a_poisson_rate_do_not_all_send_their_first_request_at_zero() -> None:
    shards = _shard_offsets(_spec("poisson", [{"name": "a", "share": 1.0, "workers": 16}]))
    firsts = sorted(float(s[0]) for s in shards)
    assert firsts[0] == 0.0 and len(set(firsts)) == 16
    assert firsts[-1] > 0.2  # the last shard's first request at its phase, 15/16 of a gap on
    total = sum(s.size for s in shards)
    assert abs(total - 640) < 4 * np.sqrt(640)  # still the rate: about 640 in 10 s


def test_a_phase_outside_a_unit_gap_is_refused() -> None:
    with pytest.raises(ValueError, match=r"phase must be in \[0, 1\)"):
        list(open_loop_offsets("constant", 1.0, 1.0, 1.0, 1.0, 1, 10, phase=1.0))
