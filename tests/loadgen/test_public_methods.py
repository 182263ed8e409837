"""The shipped Artificial Analysis specs (examples/aa-*.toml) do what their comments say: the
published input and output lengths, one request at a time then ten at once (the load test:
its closed-loop steps), run here shortened against the simulated engine, each request asking
the method's output length with a prompt of its input length as the engine counted it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.checks.specfile import load_spec
from loadgen.results.records import Outcome
from tests.support.shards import run_spec

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "examples"
# input / output tokens the methodology page publishes for each workload
PUBLISHED = {"100": (100, 300), "1k": (1000, 1000), "10k": (10_000, 1500), "100k": (100_000, 2000)}


def test_the_published_lengths_and_scenarios_are_the_specs() -> None:
    for name, (inp, out) in PUBLISHED.items():
        spec = load_spec(EXAMPLES / f"aa-{name}.toml")
        assert (spec.workload.prompt_tokens.value, spec.workload.output_tokens.value) == (inp, out)  # type: ignore[union-attr]
        assert spec.load.concurrency == [1, 10]
    load = load_spec(EXAMPLES / "aa-load-test.toml").load
    assert load.concurrency == [1, 2, 4, 8, 16, 32, 64]
    assert load.duration_s - load.warmup_s - load.cooldown_s == 180  # 3-minute phases


@pytest.mark.parametrize("name", ["aa-100", "aa-10k", "aa-load-test"])
def test_a_shortened_method_runs_against_the_sim(name: str, sim_factory: Any) -> None:
    sim = sim_factory(["--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "0.2"])
    spec = load_spec(EXAMPLES / f"{name}.toml")
    levels = (spec.load.concurrency or [])[:3]
    short = spec.load.model_copy(
        update={"duration_s": 1.5, "warmup_s": 0.0, "cooldown_s": 0.0, "concurrency": levels}
    )
    spec = spec.model_copy(
        update={"target": spec.target.model_copy(update={"base_url": sim.base_url}), "load": short}
    )
    _, sink = run_spec(spec, warm=max(levels))
    recs = [r for r in sink.records if r.outcome is Outcome.OK]
    assert recs and len(recs) == len(sink.records)
    assert {r.level for r in recs} == set(range(len(levels)))
    inp, out = spec.workload.prompt_tokens.value, spec.workload.output_tokens.value  # type: ignore[union-attr]
    truth = {t["request_id"]: t for t in sim.wait_truth(len(recs), timeout_s=20.0)}
    for r in recs:
        t = truth[r.request_id]
        assert (t["prompt_tokens"], t["max_tokens"], t["completion_tokens"]) == (inp, out, out)
