"""Workloads: seeded and reproducible, lengths as asked, shared prefixes shared, datasets read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen.engine.workload import (
    Workload,
    calibrate_tokens_per_word,
    load_dataset,
    request_body,
    sample_lengths,
)
from loadgen.errors import SpecError
from loadgen.runspec.lengths import LognormalLength, NormalLength
from loadgen.runspec.spec import spec_from_dict


def spec(**workload: object) -> object:
    return spec_from_dict(
        {
            "name": "w",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
            "workload": workload,
            "load": {"concurrency": [1], "duration_s": 1},
        }
    )


def words(text: str) -> int:
    return len(text.split())


def test_prompts_are_reproducible_and_have_the_planned_length() -> None:
    s = spec(prompt_tokens={"dist": "uniform", "min": 50, "max": 90}, output_tokens=33)
    a, b = Workload(s, 11), Workload(s, 11)  # type: ignore[arg-type]
    for i in range(20):
        pa, pb = a.prompt(i), b.prompt(i)
        assert pa == pb
        assert 50 <= pa.prompt_tokens <= 90
        assert words(pa.messages[-1]["content"]) == pa.prompt_tokens  # one word = one token
        assert pa.max_tokens == 33
    assert Workload(s, 12).prompt(0) != a.prompt(0)  # type: ignore[arg-type]


def test_shared_prefix_is_common_to_all_shards() -> None:
    s = spec(prompt_tokens=100, shared_prefix_fraction=0.6)
    x, y = Workload(s, 1).prompt(3), Workload(s, 2).prompt(9)  # type: ignore[arg-type]
    px, py = x.messages[-1]["content"].split(), y.messages[-1]["content"].split()
    assert px[:60] == py[:60]
    assert px[60:] != py[60:]
    assert len(px) == len(py) == 100


def test_calibration_scales_word_counts() -> None:
    s = spec(prompt_tokens=300)
    p = Workload(s, 1, tokens_per_word=1.5).prompt(0)  # type: ignore[arg-type]
    assert words(p.messages[-1]["content"]) == 200
    assert calibrate_tokens_per_word([(64, 64 * 1.3 + 20), (256, 256 * 1.3 + 20)]) == pytest.approx(
        1.3
    )
    assert calibrate_tokens_per_word([]) == 1.0


def test_length_distributions_respect_their_parameters() -> None:
    rng = np.random.default_rng(0)
    n = sample_lengths(NormalLength(dist="normal", mean=200, std=20, min=150, max=260), 20_000, rng)
    assert n.mean() == pytest.approx(200, rel=0.01)
    assert n.min() >= 150 and n.max() <= 260
    ln = sample_lengths(LognormalLength(dist="lognormal", median=500, sigma=0.5), 20_000, rng)
    assert np.median(ln) == pytest.approx(500, rel=0.03)


def test_body_for_chat_and_completions() -> None:
    s = spec(prompt_tokens=5, output_tokens=7)
    p = Workload(s, 0).prompt(0)  # type: ignore[arg-type]
    body = request_body(s, p)  # type: ignore[arg-type]
    assert body["max_tokens"] == 7 and body["messages"][0]["role"] == "user"


def test_dataset_rows_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "d.jsonl"
    good.write_text('{"prompt": "hello there", "output_tokens": 5}\n\n{"prompt": "x"}\n')
    assert len(load_dataset(str(good))) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    with pytest.raises(SpecError, match=r"line 2: needs a string \"prompt\""):
        load_dataset(str(bad))
