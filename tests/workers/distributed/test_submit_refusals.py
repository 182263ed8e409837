"""What `submit` refuses before a run row or a task exists (issue 15): literal secret values
(plans reach the workers redacted, through the broker) and a shard load over the per-process
ceiling. No broker or store is touched: the refusals come first."""

from __future__ import annotations

from typing import Any, cast

import pytest

from loadgen.errors import CapacityError, SpecError
from loadgen.runspec.spec import spec_from_dict
from workers.coordinator import Coordinator, SubmitOptions

UNUSED = "postgresql://nobody@127.0.0.1:1/none"  # connecting would fail the test loudly


def coordinator() -> Coordinator:
    return Coordinator(UNUSED, "redis://127.0.0.1:1/0", app=cast(Any, object()))


def spec(target: dict[str, Any], load: dict[str, Any] | None = None) -> Any:
    return spec_from_dict(
        {
            "name": "t",
            "target": {
                "api": "openai-chat",
                "base_url": "http://127.0.0.1:9/v1",
                "model": "m",
                **target,
            },
            "load": load or {"concurrency": [2], "duration_s": 1},
        }
    )


def test_a_literal_secret_header_is_refused_for_distributed_runs() -> None:
    with pytest.raises(SpecError) as e:
        coordinator().create(spec({"headers": {"X-Auth-Token": "sk-1"}}), SubmitOptions())
    assert "header 'X-Auth-Token' would reach the workers only in the clear" in str(e.value)
    assert "headers_env" in str(e.value) and "sk-1" not in str(e.value)


def test_a_shard_over_the_ceiling_is_refused_with_its_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    big = spec(
        {"headers": {"X-Team": "perf"}, "public_headers": ["X-Team"]},
        {"concurrency": [40_000], "duration_s": 1},
    )
    with pytest.raises(CapacityError, match=r"shard local-0: .*40,000 streams at once"):
        coordinator().create(big, SubmitOptions(preflight=False))
