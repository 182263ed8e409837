"""analysis.reports.cost against hand-computed values: what a run cost, per million tokens per level
at the measured throughput, billed tokens (usage first; a 429 is not billed), the break-even."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.reports.cost import billed_tokens, cost_basis, cost_spec, run_cost


def _df() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "level": [0, 0, 1, 1, 1],
            "phase": ["steady"] * 5,
            "http_status": [200, 200, 200, 200, 429],
            "prompt_tokens": [100, 100, 100, 100, 100],
            "usage_prompt_tokens": [110, None, 110, 110, None],
            "output_tokens": [50, 50, 50, 50, 0],
            "usage_completion_tokens": [None, 40, 50, 50, None],
        }
    )


def test_billed_tokens_prefer_usage_and_skip_unanswered() -> None:
    inp, out = billed_tokens(_df())
    assert inp.tolist() == [110, 100, 110, 110, 0]
    assert out.tolist() == [50, 40, 50, 50, 0]


def test_per_token_run() -> None:
    run = {
        "spec": {"cost": {"input_per_mtok": 0.15, "output_per_mtok": 0.60, "as_of": "2026-10-19"}},
        "duration_s": 60.0,
    }
    levels = [
        {"level": 0, "output_tokens_per_s": 9.0},
        {"level": 1, "output_tokens_per_s": 10.0},
    ]
    c = run_cost(run, _df(), levels)
    assert c["basis"] == "per-token"
    # 430 input x 0.15 + 190 output x 0.60, per million: (64.5 + 114) / 1e6
    assert c["total_usd"] == pytest.approx(178.5e-6)
    assert c["usd_per_mtok_output_run"] == pytest.approx(178.5 / 190)
    lv1 = c["levels"][1]
    assert (lv1["input_tokens"], lv1["output_tokens"]) == (220, 100)
    # 10 output tokens/s with 2.2 input tokens per output token: 22 input tokens/s
    assert lv1["input_tokens_per_s"] == pytest.approx(22.0)
    assert lv1["usd_per_mtok_output"] == 0.60
    assert lv1["per_token_usd_per_mtok_output"] == pytest.approx(0.60 + 0.15 * 2.2)
    assert c["prices"]["as_of"] == "2026-10-19"
    assert c["break_even"] is None  # no self-hosted price


def test_self_hosted_run_and_break_even() -> None:
    run = {
        "spec": {
            "cost": {
                "gpu_hourly_usd": 1.5,
                "gpus": 2,
                "input_per_mtok": 0.15,
                "output_per_mtok": 0.60,
            }
        },
        "duration_s": 600.0,
    }
    levels = [
        {"level": 0, "output_tokens_per_s": 500.0},
        {"level": 1, "output_tokens_per_s": 2000.0},
    ]
    c = run_cost(run, _df(), levels)
    assert c["basis"] == "self-hosted"
    assert c["total_usd"] == pytest.approx(3.0 * 600 / 3600)  # 0.50 USD
    # 3 USD/h at 2,000 tokens/s = 7.2 M tokens/h: 0.41667 USD per million output tokens
    assert c["levels"][1]["usd_per_mtok_output"] == pytest.approx(3.0 / 7.2)
    # 22 input tokens/s... scaled: 2,000 x 220 / 100 = 4,400 input tokens/s
    assert c["levels"][1]["usd_per_mtok_input"] == pytest.approx(3.0 / (4400 * 3600) * 1e6)
    be = c["break_even"]
    # run-wide 430 in / 190 out: blended 0.60 + 0.15 x 430/190 = 0.93947 USD per M output
    blended = 0.60 + 0.15 * 430 / 190
    assert be["output_tokens_per_s"] == pytest.approx(3.0 * 1e6 / (blended * 3600))
    assert be["utilisation_needed"] == pytest.approx(be["output_tokens_per_s"] / 2000.0)
    assert "self-hosted is cheaper" in be["sentence"]


def test_no_price_no_cost() -> None:
    c = run_cost({"spec": {}, "duration_s": 5.0}, _df(), [{"level": 0, "output_tokens_per_s": 1}])
    assert c["basis"] is None and c["total_usd"] is None


def test_without_a_price_the_levels_throughput_changes_no_cost_figure() -> None:
    """The Compare page skips a run's summary when cost_basis is None: every cost figure of
    the block is then the same with or without the levels' throughput."""
    run = {"spec": {}, "duration_s": 60.0}
    levels = [{"level": 0, "output_tokens_per_s": 9.0}, {"level": 1, "output_tokens_per_s": 10.0}]
    assert cost_basis(cost_spec(run)) is None
    with_levels, without = run_cost(run, _df(), levels), run_cost(run, _df(), [])
    for key in ("basis", "total_usd", "usd_per_mtok_output_run", "prices", "break_even"):
        assert with_levels[key] == without[key]
    assert not any("usd_per_mtok_output" in lv for lv in with_levels["levels"])
    priced = {"spec": {"cost": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}
    assert cost_basis(cost_spec(priced)) == "per-token"
