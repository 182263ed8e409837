"""The run's one saturation answer from its shards': pooled shards agree, a shard cut short
holds a prefix of the others' answer (the complete one is stored, the stopped shard named),
and only answers that truly disagree are kept per shard as "not pooled"."""

from __future__ import annotations

from typing import Any

from analysis.reports.summary_table import search_line
from loadgen.engine.search import search_answer
from loadgen.results.binomial import Verdict
from workers.store.searches import merge_searches

FULL: list[tuple[float, Verdict]] = [(10.0, "pass"), (20.0, "pass"), (40.0, "fail"), (30.0, "pass")]


def _answer(tried: list[tuple[float, Verdict]], missing: list[str] | None = None) -> dict[str, Any]:
    a = search_answer(tried, 0.9)
    a.update(pooled=True, pool_complete=not missing, missing_shards=missing or [])
    return a


def test_a_shard_cut_short_stores_the_complete_pooled_answer() -> None:
    # b-0 stopped after two levels; a-0 and c-0 ran on without it, their pools lacking b-0
    per_shard = {
        "a-0": _answer(FULL, ["b-0"]),
        "b-0": _answer(FULL[:2]),
        "c-0": _answer(FULL, ["b-0"]),
    }
    merged = merge_searches(per_shard)
    assert "per_shard" not in merged and merged["pooled"] is True
    assert merged["highest_passing"] == 30.0 and merged["next_failing"] == 40.0
    assert merged["tried"] == per_shard["a-0"]["tried"]
    assert merged["stopped_early"] == ["b-0"]
    assert merged["pool_complete"] is False and merged["missing_shards"] == ["b-0"]
    line = search_line({"search": merged})
    assert line is not None and "30 req/s" in line and "not pooled" not in line
    assert "b-0 stopped" in line


def test_agreeing_shards_store_their_answer_unchanged() -> None:
    a = _answer(FULL)
    assert merge_searches({"a-0": a, "b-0": _answer(FULL)}) == a
    assert merge_searches({"a-0": a}) == a


def test_answers_that_disagree_stay_per_shard() -> None:
    other: list[tuple[float, Verdict]] = [(10.0, "pass"), (20.0, "fail")]  # not a prefix
    for per_shard, lowest in (
        ({"a-0": _answer(FULL), "b-0": _answer(other)}, 10.0),
        (
            {
                "a-0": {**_answer(FULL), "pooled": False},
                "b-0": {**_answer(FULL[:2]), "pooled": False},
            },
            20.0,
        ),
        ({"a-0": _answer(FULL), "b-0": {**_answer(FULL[:2]), "confidence": 0.95}}, 20.0),
    ):
        merged = merge_searches(per_shard)
        assert merged["pooled"] is False and set(merged["per_shard"]) == {"a-0", "b-0"}
        assert merged["highest_passing"] == lowest  # the lowest of theirs: the load all met
        assert "not pooled" in str(search_line({"search": merged}))


def test_a_shard_that_handed_in_no_answer_is_named_stopped_early() -> None:
    # b-0 was killed (or stopped by a time limit before its runner returned): no answer of its
    # own; c-0 stopped before deciding any load (its answer so far has nothing tried)
    cases: list[tuple[dict[str, dict[str, Any]], list[str], list[str]]] = [
        ({"a-0": _answer(FULL, ["b-0"])}, ["b-0"], ["b-0"]),
        ({"a-0": _answer(FULL, ["b-0"]), "c-0": search_answer([], 0.9)}, ["b-0"], ["b-0", "c-0"]),
        ({"a-0": _answer(FULL), "c-0": _answer(FULL[:1])}, ["b-0"], ["b-0", "c-0"]),
    ]
    for per_shard, without, named in cases:
        merged = merge_searches(per_shard, without)
        assert "per_shard" not in merged and merged["tried"] == per_shard["a-0"]["tried"]
        assert merged["highest_passing"] == 30.0 and merged["stopped_early"] == named
        line = search_line({"search": merged})
        assert line is not None and f"{', '.join(named)} stopped before the search ended" in line
    # nobody decided anything: the answer says so, naming every shard
    merged = merge_searches({"a-0": search_answer([], 0.9)}, ["b-0"])
    assert merged["highest_passing"] is None and merged["stopped_early"] == ["a-0", "b-0"]
