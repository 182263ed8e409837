"""A run's levels from its shards' own: the span covers every shard, the steady window is where
all of them were steady (throughput pooled over shards divides by a window all were loading)."""

from __future__ import annotations

from workers.store.runs import merge_levels

S = 1_000_000_000


def _lv(level: int, start: int, steady: tuple[int, int], drained: int | None) -> dict[str, object]:
    return {
        "level": level,
        "kind": "rate",
        "value": 10.0,
        "duration_s": 10.0,
        "warmup_s": 1.0,
        "cooldown_s": 1.0,
        "started_at_ns": start,
        "ended_at_ns": start + 10 * S,
        "steady_start_ns": steady[0],
        "steady_end_ns": steady[1],
        "drained_at_ns": drained,
        "between_levels": "drain",
        "search": None,
    }


def test_merged_window_is_where_every_shard_was_steady() -> None:
    a = [_lv(0, 0, (1 * S, 9 * S), 11 * S), _lv(1, 11 * S, (12 * S, 20 * S), 22 * S)]
    h = S // 2
    b = [
        _lv(0, h, (S + h, 9 * S + h), 12 * S),
        _lv(1, 12 * S, (13 * S, 21 * S), None),
    ]
    l0, l1 = merge_levels([a, b])
    assert (l0["started_at_ns"], l0["ended_at_ns"]) == (0, 10 * S + h)
    assert (l0["steady_start_ns"], l0["steady_end_ns"]) == (S + h, 9 * S)
    assert l0["drained_at_ns"] == 12 * S
    assert (l1["steady_start_ns"], l1["steady_end_ns"]) == (13 * S, 20 * S)
    assert l1["drained_at_ns"] == 22 * S  # the one shard that drained; None is not a time


def test_shards_never_steady_together_give_an_empty_window() -> None:
    a = [_lv(0, 0, (1 * S, 2 * S), None)]
    b = [_lv(0, 0, (3 * S, 4 * S), None)]
    (lv,) = merge_levels([a, b])
    assert lv["steady_start_ns"] == lv["steady_end_ns"] == 3 * S
