"""The planner: sums exact per level, seeds distinct and deterministic, JSON round trip."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from loadgen.engine.plan import ShardPlan
from loadgen.errors import SpecError
from loadgen.runspec.spec import spec_from_dict
from workers.planner import level_count, plan_run, split_largest_remainder


def _spec(**load: object) -> dict[str, object]:
    return {
        "name": "t",
        "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "load": {"duration_s": 10, **load},
    }


def _regions(shares: list[float], workers: list[int]) -> list[dict[str, object]]:
    return [
        {"name": f"r{i}", "share": s, "workers": w}
        for i, (s, w) in enumerate(zip(shares, workers, strict=True))
    ]


def test_default_region_is_one_shard() -> None:
    spec = spec_from_dict(_spec(concurrency=[3, 7]))
    (plan,) = plan_run(spec, "run-1")
    assert plan.shard_id == "local-0"
    assert plan.fraction == 1.0
    assert plan.users_per_level == [3, 7]
    assert plan.max_requests == spec.load.max_requests


def test_users_and_max_requests_add_up_randomised() -> None:
    rng = random.Random(1234)
    for _ in range(300):
        nreg = rng.randint(1, 4)
        raw = [rng.randint(1, 100) for _ in range(nreg)]
        # shares as the user would write them: rounded decimals adding up to 1
        shares = [round(r / sum(raw), 6) for r in raw]
        shares[-1] = round(1 - sum(shares[:-1]), 6)
        if shares[-1] <= 0:
            continue
        workers = [rng.randint(1, 5) for _ in range(nreg)]
        levels = [rng.randint(1, 50) for _ in range(rng.randint(1, 4))]
        maxreq = rng.randint(1, 10_000)
        spec = spec_from_dict(
            {
                **_spec(concurrency=levels, max_requests=maxreq),
                "regions": _regions(shares, workers),
            }
        )
        plans = plan_run(spec, "r")
        assert len(plans) == sum(workers)
        for lv, count in enumerate(levels):
            assert sum(p.users_per_level[lv] for p in plans) == count
            # largest remainder: each shard within one user of its exact quota
            for p in plans:
                assert abs(p.users_per_level[lv] - count * p.fraction) < 1 + 1e-9
        assert sum(p.max_requests for p in plans) == maxreq
        assert abs(sum(p.fraction for p in plans) - 1) < 1e-9
        assert len({p.seed for p in plans}) == len(plans)
        assert len({p.shard_id for p in plans}) == len(plans)


def test_fraction_is_region_share_over_workers() -> None:
    spec = spec_from_dict({**_spec(rate=[10.0]), "regions": _regions([0.5, 0.5], [2, 1])})
    plans = plan_run(spec, "r")
    assert [p.shard_id for p in plans] == ["r0-0", "r0-1", "r1-0"]
    assert [p.fraction for p in plans] == [0.25, 0.25, 0.5]
    assert all(p.users_per_level == [] for p in plans)
    assert level_count(spec) == 1


def test_override_workers_per_region() -> None:
    spec = spec_from_dict({**_spec(concurrency=[10]), "regions": _regions([0.3, 0.7], [1, 1])})
    plans = plan_run(spec, "r", workers_per_region={"r1": 3})
    assert [p.shard_id for p in plans] == ["r0-0", "r1-0", "r1-1", "r1-2"]
    assert sum(p.users_per_level[0] for p in plans) == 10
    with pytest.raises(SpecError, match="unknown region"):
        plan_run(spec, "r", workers_per_region={"nowhere": 1})
    with pytest.raises(SpecError, match="at least one worker"):
        plan_run(spec, "r", workers_per_region={"r0": 0})


def test_deterministic_and_seed_dependent() -> None:
    d = {**_spec(concurrency=[5], seed=7), "regions": _regions([0.5, 0.5], [2, 2])}
    a = plan_run(spec_from_dict(d), "run")
    b = plan_run(spec_from_dict(d), "run")
    assert a == b
    d2 = {**_spec(concurrency=[5], seed=8), "regions": _regions([0.5, 0.5], [2, 2])}
    c = plan_run(spec_from_dict(d2), "run")
    assert {p.seed for p in a}.isdisjoint({p.seed for p in c})
    d3 = {**d, "workload": {"seed": 1}}
    e = plan_run(spec_from_dict(d3), "run")
    assert [p.seed for p in a] != [p.seed for p in e]


def test_json_round_trip() -> None:
    spec = spec_from_dict({**_spec(concurrency=[4]), "regions": _regions([0.25, 0.75], [1, 2])})
    for p in plan_run(spec, "run"):
        again = ShardPlan.from_json(json.loads(json.dumps(p.to_json())))
        assert again == p
        assert again.run_spec() == spec


def test_split_largest_remainder_exact() -> None:
    w = [Fraction(1, 3)] * 3
    assert split_largest_remainder(10, w) == [4, 3, 3]
    assert split_largest_remainder(0, w) == [0, 0, 0]
    with pytest.raises(ValueError, match="negative"):
        split_largest_remainder(-1, w)


def test_submit_refuses_a_query_string_in_the_target_url() -> None:
    from workers.coordinator import Coordinator, SubmitOptions

    spec = spec_from_dict(
        {
            **_spec(rate=[1.0]),
            "target": {
                "api": "openai-chat",
                "model": "m",
                # not credential-like (the spec refuses those itself), but any query string
                # would travel through the broker and be stored with the spec
                "base_url": "http://127.0.0.1:9/v1?api-version=2024-06",
            },
        }
    )
    # unroutable store and broker: the refusal comes before either is touched
    coord = Coordinator("postgresql://127.0.0.1:1/x", "redis://127.0.0.1:1/0")
    with pytest.raises(SpecError, match=r"target.base_url: a query string"):
        coord.create(spec, SubmitOptions())
