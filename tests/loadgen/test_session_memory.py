"""What a multi-turn session holds is counted by admission (issue 22): the history of every
turn against the memory available, with its numbers; the spec's cross-field bounds (search
start <= max, a deadline above its floor) accept their edges."""

from __future__ import annotations

import math
from typing import Any

import pytest

from loadgen.checks import admission
from loadgen.checks.session_memory import BYTES_PER_TOKEN, mean_tokens, session_bytes
from loadgen.errors import CapacityError, SpecError
from loadgen.runspec.lengths import LognormalLength, NormalLength, UniformLength
from loadgen.runspec.spec import RunSpec, spec_from_dict
from loadgen.runspec.spec_bounds import MIN_DEADLINE_S
from workers.planner import plan_run


def make_spec(workload: dict[str, Any], users: int = 100, **target: Any) -> RunSpec:
    return spec_from_dict(
        {
            "name": "t",
            "target": {"base_url": "http://127.0.0.1:9/v1", "model": "m", **target}
            | {"api": "openai-chat"},
            "load": {"concurrency": [users], "duration_s": 1.0},
            "workload": workload,
        }
    )


SESSIONS = {"prompt_tokens": 100, "output_tokens": 200,
            "sessions": {"turns": 10, "user_tokens_per_turn": 50}}  # fmt: skip


def test_a_session_holds_its_whole_history_at_the_last_turn() -> None:
    spec = make_spec(SESSIONS)
    assert session_bytes(spec.workload) == (100 + 9 * 50 + 10 * 200) * BYTES_PER_TOKEN
    assert session_bytes(make_spec({"prompt_tokens": 100}).workload) == 0


def test_mean_tokens_of_each_distribution() -> None:
    assert mean_tokens(UniformLength(dist="uniform", min=10, max=30)) == 20
    assert mean_tokens(NormalLength(dist="normal", mean=50, std=5)) == 50
    assert mean_tokens(NormalLength(dist="normal", mean=50, std=5, max=40)) == 40
    lognormal = LognormalLength(dist="lognormal", median=100, sigma=1.0)
    assert mean_tokens(lognormal) == pytest.approx(100 * math.exp(0.5))


def test_history_is_counted_against_the_memory_available() -> None:
    spec = make_spec(SESSIONS)
    plans = plan_run(spec, "admission")
    streams_only = admission.BASE_BYTES + 100 * admission.STREAM_BYTES
    history = 100 * (100 + 9 * 50 + 10 * 200) * BYTES_PER_TOKEN
    # enough for the streams alone, not for their history
    cap = admission.Capacity(16_384, math.ceil((streams_only + history / 2) / 0.8), 1 << 20,
                             1 << 20)  # fmt: skip
    with pytest.raises(CapacityError) as err:
        admission.admit(spec, plans, capacity=cap)
    msg = str(err.value)
    assert "100 x (64 KiB per stream + 39.8 KiB of session history at the last turn" in msg
    assert "2,550 tokens x 16 bytes" in msg and "available" in msg
    roomy = admission.Capacity(16_384, math.ceil((streams_only + history) / 0.8) + 1, 1 << 20,
                               1 << 20)  # fmt: skip
    needs = admission.admit(spec, plans, capacity=roomy)
    assert needs.memory_bytes == streams_only + history


def test_search_bounds_and_deadline_floor_accept_their_edges() -> None:
    target = {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m",
              "deadline_s": MIN_DEADLINE_S}  # fmt: skip
    slos = [{"metric": "ttft_ms", "percentile": 99, "threshold": 800}]
    base = {"name": "t", "target": target, "slos": slos}
    ok = spec_from_dict({**base, "load": {"saturation": {"start": 8.0, "max": 8.0},
                                          "duration_s": 1.0}})  # fmt: skip
    assert ok.load.saturation is not None and ok.target.deadline_s == MIN_DEADLINE_S
    with pytest.raises(SpecError, match=r"start \(8\.5\) is above max \(8\)"):
        spec_from_dict({**base, "load": {"saturation": {"start": 8.5, "max": 8.0},
                                         "duration_s": 1.0}})  # fmt: skip
    with pytest.raises(SpecError, match=r"target\.deadline_s"):
        make_spec({}, deadline_s=MIN_DEADLINE_S / 2)
