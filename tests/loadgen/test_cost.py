"""Cost arithmetic against hand-computed values, and prices filled in from presets (dated)."""

from __future__ import annotations

import datetime as dt

import pytest

from loadgen.errors import SpecError
from loadgen.runspec import cost as c
from loadgen.runspec.spec import spec_from_dict

BASE = {
    "name": "c",
    "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
    "load": {"concurrency": [1], "duration_s": 1},
}


def test_arithmetic_by_hand() -> None:
    both = c.CostSpec(gpu_hourly_usd=2.0, gpus=2, input_per_mtok=0.15, output_per_mtok=0.60)
    assert both.hourly_usd == 4.0
    # 1,000 input and 500 output tokens: 1000 x 0.15 / 1e6 + 500 x 0.60 / 1e6 = 0.00045 USD
    assert c.token_cost_usd(1000, 500, both) == pytest.approx(0.00045)
    # half an hour of two GPUs at 2 USD/h = 2 USD
    assert c.hosted_cost_usd(1800, both) == pytest.approx(2.0)
    # 4 USD/h at 500 tokens/s = 1.8 M tokens/h: 4 / 1.8 = 2.2222 USD per million
    assert c.per_mtok_at(500, both) == pytest.approx(4 / 1.8)
    # 2 input tokens per output token: 0.60 + 2 x 0.15 = 0.90 USD per million output tokens
    assert c.blended_per_mtok_output(1000, 500, both) == pytest.approx(0.90)
    # 4 USD/h = 0.90 USD per M output tokens x T x 3600 -> T = 4e6 / 3240 = 1234.57 tokens/s
    assert c.break_even_output_tok_s(1000, 500, both) == pytest.approx(4e6 / 3240)
    none = c.CostSpec()
    assert c.token_cost_usd(1, 1, none) is None and c.per_mtok_at(500, none) is None
    assert c.per_mtok_at(0.0, both) is None


def test_prices_come_from_the_preset_dated_and_stay_overridable() -> None:
    spec = spec_from_dict(
        {
            **BASE,
            "target": {
                "preset": "groq",
                "model": "openai/gpt-oss-120b",
                "base_url": "https://api.groq.com/openai/v1",
            },
        }
    )
    assert (spec.cost.input_per_mtok, spec.cost.output_per_mtok) == (0.15, 0.60)
    assert spec.cost.as_of == dt.date(2026, 10, 19) and "groq" in spec.cost.source
    # stored with the run: the spec as stored carries the price it was costed at
    assert spec.public_dict()["cost"]["output_per_mtok"] == 0.60
    own = spec_from_dict(
        {
            **BASE,
            "target": {"preset": "groq", "model": "openai/gpt-oss-120b"},
            "cost": {"input_per_mtok": 0.1, "output_per_mtok": 0.5},
        }
    )
    assert (own.cost.output_per_mtok, own.cost.source) == (0.5, "spec")
    # a self-hosted run priced against another provider's list price
    vs = spec_from_dict(
        {
            **BASE,
            "cost": {
                "gpu_hourly_usd": 2.5,
                "price_preset": "cerebras",
                "price_model": "gpt-oss-120b",
            },
        }
    )
    assert vs.cost.hourly_usd == 2.5 and vs.cost.output_per_mtok == 0.75
    with pytest.raises(SpecError, match="no price for model"):
        spec_from_dict({**BASE, "cost": {"price_preset": "groq", "price_model": "nope"}})


def test_prices_are_paired() -> None:
    with pytest.raises(SpecError, match="go together"):
        spec_from_dict({**BASE, "cost": {"input_per_mtok": 0.1}})
