"""The run's one saturation answer from its shards' (loadgen.engine.search.search_answer): pooled
shards agree, a shard cut short holds a prefix of the others', and a shard that handed in nothing (a
kill, a time limit) is named as stopped early, never left out unseen."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def merge_searches(
    per_shard: Mapping[str, Mapping[str, Any]], without: Iterable[str] = ()
) -> dict[str, Any]:
    """The run's one saturation answer from its shards' (loadgen.engine.search.search_answer). One
    shard: its answer. Shards that searched together on pooled samples decide every level
    alike, so their answers agree, except that a shard whose search was cut short (a stop, a
    time limit) holds a prefix of the others' `tried`: then the answer is the longest one,
    which all the others' are prefixes of, with `stopped_early` naming the shards that stopped
    before it ended, and `missing_shards` / `pool_complete` over every shard's pools. Answers
    that truly disagree (not pooled, or pooled and not prefixes of one): every shard's under
    "per_shard" (pooled False), "highest_passing" the lowest of theirs, the load all met.
    `without` names the run's shards that handed in no answer (killed, or stopped by a time
    limit before their runner returned); they, and shards that decided no load, are named in
    `stopped_early` whatever the rest agree on."""
    early = set(without) | {s for s, a in per_shard.items() if not a.get("tried")}
    answered = {s: a for s, a in per_shard.items() if a.get("tried")} or dict(per_shard)
    merged = _merge_answered(answered)
    stopped = sorted(early | set(merged.get("stopped_early") or []))
    if stopped:
        merged["stopped_early"] = stopped
    return merged


def _merge_answered(per_shard: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    if len(per_shard) == 1:
        return dict(next(iter(per_shard.values())))
    longest = max(per_shard.values(), key=lambda a: len(a.get("tried") or []))
    if all(a.get("pooled") for a in per_shard.values()) and all(
        _is_prefix(a, longest) for a in per_shard.values()
    ):
        merged = dict(longest)
        n = len(longest.get("tried") or [])
        stopped = sorted(s for s, a in per_shard.items() if len(a.get("tried") or []) < n)
        if stopped:
            merged["stopped_early"] = stopped
        if "missing_shards" in longest:
            missing = sorted({m for a in per_shard.values() for m in a.get("missing_shards") or []})
            merged["missing_shards"] = missing
            merged["pool_complete"] = not missing
        return merged
    best = [a.get("highest_passing") for a in per_shard.values()]
    return {
        "highest_passing": None if None in best else min(best),  # type: ignore[type-var]
        "pooled": False,
        "per_shard": {s: dict(a) for s, a in per_shard.items()},
    }


def _is_prefix(answer: Mapping[str, Any], longest: Mapping[str, Any]) -> bool:
    """`answer` is `longest` cut short: the same rule and confidence, and its tried loads and
    verdicts the first of `longest`'s."""
    tried, full = list(answer.get("tried") or []), list(longest.get("tried") or [])
    return (
        all(answer.get(k) == longest.get(k) for k in ("rule", "confidence", "pooled"))
        and tried == full[: len(tried)]
    )
