"""Multi-LoRA and prefix-comparison workloads: each request's adapter is a seeded weighted draw
(per request, or per run of `switch_every`), named as the `model` or llama.cpp's `lora` list;
`compare_prefix` sends half the requests without the shared prefix at the same length; bad
adapter tables get one clear error; usage's cached_tokens reaches the record's field."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from loadgen.engine.fold import finish_tokens
from loadgen.engine.workload import Workload, request_body
from loadgen.errors import SpecError
from loadgen.results.records import RequestRecord
from loadgen.runspec.spec import RunSpec, spec_from_dict
from loadgen.targets.openai_stream import parse_usage

TWO = [{"name": "sql", "weight": 3.0}, {"name": "chat", "weight": 1.0}]


def spec(**workload: Any) -> RunSpec:
    return spec_from_dict(
        {
            "name": "w",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
            "workload": workload,
            "load": {"concurrency": [1], "duration_s": 1},
        }
    )


def test_weighted_draws_are_seeded_and_follow_the_weights() -> None:
    s = spec(adapters=TWO, prompt_tokens=8)
    a, b = Workload(s, 7), Workload(s, 7)
    names = [a.prompt(i).adapter for i in range(4000)]
    assert names == [b.prompt(i).adapter for i in range(4000)]  # the same (seed, index)
    share = Counter(names)["sql"] / len(names)
    assert 0.72 < share < 0.78  # 3:1; binomial sd at n = 4000 is 0.007
    assert names != [Workload(s, 8).prompt(i).adapter for i in range(4000)]  # another shard


def test_switch_every_gives_runs_of_n() -> None:
    s = spec(adapters=TWO, switch_every=5, prompt_tokens=8)
    w = Workload(s, 3)
    names = [w.prompt(i).adapter for i in range(500)]
    for start in range(0, 500, 5):
        assert len(set(names[start : start + 5])) == 1
    switches = sum(x != y for x, y in itertools.pairwise(names))
    assert 0 < switches < 100  # only at run boundaries, and not at every one


def test_the_adapter_is_named_as_the_model_or_as_llamacpps_lora_list() -> None:
    s = spec(adapters=TWO, prompt_tokens=8)
    p = Workload(s, 1).prompt(0)
    assert request_body(s, p)["model"] == p.adapter
    lora = [
        {"name": "base"},
        {"name": "a", "lora_id": 0, "scale": 0.5},
        {"name": "b", "lora_id": 1},
    ]
    s = spec(adapters=lora, adapter_field="lora", prompt_tokens=8)
    w = Workload(s, 1)
    bodies = {}
    for i in range(60):
        p = w.prompt(i)
        bodies[p.adapter] = request_body(s, p)
    assert bodies["base"]["lora"] == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
    assert bodies["a"]["lora"] == [{"id": 0, "scale": 0.5}]
    assert bodies["b"]["lora"] == [{"id": 1, "scale": 1.0}]
    assert all("model" not in b for b in bodies.values())  # the target's model stands


def test_compare_prefix_sends_half_without_the_shared_prefix_at_the_same_length() -> None:
    s = spec(prompt_tokens=100, shared_prefix_fraction=0.8, compare_prefix=True)
    w = Workload(s, 5)
    prompts = [w.prompt(i) for i in range(400)]
    shared = [p.shared_prefix_tokens for p in prompts]
    assert set(shared) == {0, 80}
    assert 0.4 < shared.count(0) / len(shared) < 0.6
    with_prefix = [p.messages[0]["content"] for p in prompts if p.shared_prefix_tokens]
    head = with_prefix[0].split()[:80]
    assert all(t.split()[:80] == head for t in with_prefix)
    without = [p.messages[0]["content"] for p in prompts if p.shared_prefix_tokens == 0]
    assert all(t.split()[:5] != head[:5] for t in without)
    assert {len(p.messages[0]["content"].split()) for p in prompts} == {100}
    plain = Workload(spec(prompt_tokens=100), 5).prompt(0)
    assert plain.shared_prefix_tokens is None and plain.adapter is None


@pytest.mark.parametrize(
    ("workload", "says"),
    [
        ({"adapters": [{"name": "a"}, {"name": "a"}]}, "each name may appear once"),
        ({"switch_every": 4}, "switch_every needs"),
        ({"adapters": [{"name": "a", "lora_id": 0}]}, 'lora_id is for adapter_field = "lora"'),
        ({"adapters": [{"name": "a", "weight": 0}]}, "weight"),
        ({"compare_prefix": True}, "compare_prefix needs shared_prefix_fraction"),
        ({"adapter_field": "header"}, "adapter_field"),
    ],
)
def test_bad_adapter_tables_get_one_clear_error(workload: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as e:
        spec(**workload)
    assert says in str(e.value)


def test_usage_cached_tokens_reach_the_record() -> None:
    u = parse_usage(
        {
            "prompt_tokens": 90,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 64},
        }
    )
    assert u is not None and u.cached_tokens == 64
    rec = RequestRecord("r", "run", "s", "local", 0, 0, 0, chunk_tokens=[1, 1])
    finish_tokens(rec, u, [3, 3])
    assert rec.server_cached_tokens == 64
