"""`compare` against several baseline runs (analysis.verdicts.multirun): the random-effects test
on stored-shaped frames, its notes, and the single-baseline statement."""

from __future__ import annotations

import dataclasses

import pandas as pd

from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.multirun import Side, compare_multi, re_test
from tests.analysis.storedata import level_row, run_row
from tests.support import correlated_runs as cr

MODEL = cr.LevelModel(requests=150, chunks=(10, 30))


def side(rid: str, model: cr.LevelModel, seed: int) -> Side:
    df, _, _ = cr.draw_frame([model], seed, rid)
    lv = pd.DataFrame([level_row(rid, 0, kind=model.kind, value=model.value, duration_s=30.0)])
    return Side(run_row(rid), df, lv)


def test_re_test_counts_the_between_run_spread() -> None:
    tight = re_test([100.0, 100.5, 99.5], [0.01] * 3, 103.0, 0.01)
    loose = re_test([95.0, 105.0, 100.0], [0.01] * 3, 103.0, 0.01)
    assert tight["df"] == 2 and tight["p_worse"] < 0.05 < loose["p_worse"]
    assert loose["tau"] > 4.0  # between-run sd estimated from the spread, minus within noise


def test_several_baselines_judge_and_say_so() -> None:
    bases = [side(f"b{i}", MODEL, i) for i in range(3)]
    same = compare_multi(bases, side("c", MODEL, 9), metrics=("ttft_ms", "itl_ms"), resamples=200)
    assert same.code is Exit.PASSED, same.rows[same.rows["regression"]]
    assert "run-to-run variation is counted" in same.notes[0]
    assert same.family["correction"] == "Holm" and same.family["family_size"] >= 6
    slow = dataclasses.replace(MODEL, ttft_median=MODEL.ttft_median * 2.0)
    worse = compare_multi(bases, side("s", slow, 9), metrics=("ttft_ms",), resamples=200)
    assert worse.code is Exit.FAILED and "ttft_ms" in worse.reason
    one = compare_multi(bases[:1], side("c", MODEL, 9), metrics=("ttft_ms",), resamples=200)
    assert any("not counted" in n for n in one.notes)
