"""Secrets by design (S1): header values and query parameters are redacted from what is stored
and planned unless declared public; references are resolved only for the sending process; and
the spec values no store can keep (NUL, inf, absurd sizes, `true` as a count) are refused."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.errors import SpecError
from loadgen.runspec.redact import REDACTED, redact_query
from loadgen.runspec.secrets import literal_secrets, resolve_target
from loadgen.runspec.spec import RunSpec, spec_from_dict
from workers.planner import plan_run

CANARY = "sk-canary-51d0"


def make(target: dict[str, Any] | None = None, **over: Any) -> RunSpec:
    data: dict[str, Any] = {
        "name": "t",
        "target": {"api": "openai-chat", "base_url": "http://h:8000/v1", "model": "m"},
        "load": {"concurrency": [1], "duration_s": 1.0},
    }
    data["target"].update(target or {})
    for key, value in over.items():
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[section] = value
    return spec_from_dict(data)


def test_header_values_are_redacted_unless_declared_public() -> None:
    spec = make(
        {
            "headers": {
                "X-Auth-Token": CANARY,
                "Ocp-Apim-Subscription-Key": CANARY,
                "x-goog-api-key": CANARY,
                "X-Team": "perf",
            },
            "public_headers": ["x-team"],  # names match case-insensitively
        }
    )
    stored = spec.public_dict()["target"]
    assert stored["headers"] == {
        "X-Auth-Token": REDACTED,
        "Ocp-Apim-Subscription-Key": REDACTED,
        "x-goog-api-key": REDACTED,
        "X-Team": "perf",
    }
    assert spec.target.headers["X-Auth-Token"] == CANARY  # the sending spec keeps the value
    for plan in plan_run(spec, "r"):
        assert CANARY not in str(plan.to_json())
        assert plan.run_spec().target.headers["X-Auth-Token"] == REDACTED


def test_query_values_are_redacted_unless_declared_public() -> None:
    spec = make(
        {
            "base_url": f"http://h/v1?pass={CANARY}&pwd={CANARY}&api-version=2024-06&x",
            "public_query": ["api-version"],
        }
    )
    url = spec.public_dict()["target"]["base_url"]
    assert url == f"http://h/v1?pass={REDACTED}&pwd={REDACTED}&api-version=2024-06&x={REDACTED}"
    assert redact_query("http://h/v1", []) == "http://h/v1"
    assert redact_query("http://h/v1?a%20b=1", ["a b"]) == "http://h/v1?a%20b=1"
    assert literal_secrets(spec.target) == ["query parameter 'pass'", "query parameter 'pwd'",
                                            "query parameter 'x'"]  # fmt: skip


def test_headers_env_is_resolved_only_for_the_sender() -> None:
    spec = make({"headers_env": {"X-Auth-Token": "MY_TOKEN"}})
    assert literal_secrets(spec.target) == []  # a reference travels safely
    sending = resolve_target(spec.target, {"MY_TOKEN": CANARY})
    assert sending.headers == {"X-Auth-Token": CANARY}
    assert CANARY not in str(spec.public_dict())
    with pytest.raises(SpecError, match=r"\$MY_TOKEN, which is not set"):
        resolve_target(spec.target, {})
    with pytest.raises(SpecError, match="control character"):
        resolve_target(spec.target, {"MY_TOKEN": "a\r\nX-Evil: 1"})


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"headers": {"authorization ": "Bearer x"}}, "not an HTTP header name"),
        ({"headers": {"X Auth": "x"}}, "not an HTTP header name"),
        ({"headers": {"Authorization": "Bearer x"}}, "use api_key_env"),
        ({"headers": {"X-A": "a\nb"}}, "control character"),
        ({"base_url": "http://h/v1#key=sk-1"}, "fragment"),
        ({"headers_env": {"X-A": "not a var"}}, "not an environment variable name"),
        ({"headers": {"X-A": "1"}, "headers_env": {"x-a": "V"}}, "both in headers and"),
    ],
)
def test_header_and_url_forms_that_are_refused(target: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        make(target)


@pytest.mark.parametrize(
    ("over", "where", "message"),
    [
        ({"load": {"concurrency": [True], "duration_s": 1}}, "load.concurrency[0]", "integer"),
        ({"load": {"rate": [True], "duration_s": 1}}, "load.rate[0]", "number"),
        ({"load": {"concurrency": [1], "duration_s": float("inf")}}, "load.duration_s", "finite"),
        ({"load": {"concurrency": [1], "duration_s": 1e300}}, "load.duration_s", "less than"),
        ({"load": {"concurrency": [1], "duration_s": float("nan")}}, "load.duration_s", "finite"),
        ({"load": {"rate": [1e300], "duration_s": 1}}, "load.rate", "requests/s"),
        ({"load": {"concurrency": [1], "duration_s": 1, "seed": -1}}, "load.seed", "greater"),
        ({"labels": {"model": "a\x00b"}}, "labels.model", "NUL"),
        ({"labels": {"generation": {"temperature": float("inf")}}}, "labels.generation", "finite"),
        ({"name": "x\x00"}, "name", "NUL"),
        (
            {
                "workload": {
                    "output_tokens": {"dist": "normal", "mean": 5, "std": 1, "min": 9, "max": 3}
                }
            },
            "workload.output_tokens",
            "max (3) is below min (9)",
        ),
        (
            {
                "workload": {
                    "prompt_tokens": {
                        "dist": "lognormal",
                        "median": 5,
                        "sigma": 1,
                        "min": 9,
                        "max": 3,
                    }
                }
            },
            "workload.prompt_tokens",
            "max (3) is below min (9)",
        ),
        ({"workload": {"prompt_tokens": 10**12}}, "workload.prompt_tokens", "less than"),
    ],
)
def test_values_no_run_can_hold_are_refused(over: dict[str, Any], where: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        make(**over)
    assert where in str(e.value) and message in str(e.value), str(e.value)


def test_values_a_server_echoes_back_are_scrubbed_before_they_are_stored() -> None:
    from loadgen.engine.scrubbing import ScrubbingSink
    from loadgen.results.records import Batch, Outcome, Phase, RequestRecord
    from loadgen.runspec.secrets import secret_values
    from tests.support.memsink import MemorySink

    spec = make(
        {
            "base_url": f"http://h/v1?pwd={CANARY}x&api-version=2024",
            "public_query": ["api-version"],
            "headers": {"X-Team": "perf-team"},
            "public_headers": ["X-Team"],
            "headers_env": {"X-Auth-Token": "MY_TOKEN"},
            "api_key_env": "MY_KEY",
        }
    )
    env = {"MY_TOKEN": CANARY, "MY_KEY": "sk-key-abcdef"}
    sending = resolve_target(spec.target, env)
    values = secret_values(sending, env)
    assert set(values) == {CANARY, f"{CANARY}x", "sk-key-abcdef"}  # public ones are not secret
    mem = MemorySink()
    sink = ScrubbingSink(mem, values)
    rec = RequestRecord(
        request_id="r", run_id="u", shard_id="s", region="x", level=0, index=0,
        scheduled_at_ns=0, phase=Phase.STEADY, outcome=Outcome.HTTP_ERROR,
        error_detail=f"400: bad header X-Auth-Token: {CANARY}; url ?pwd={CANARY}x, team perf-team",
    )  # fmt: skip
    sink.write(Batch([rec]))
    assert mem.records[0].error_detail == (
        "400: bad header X-Auth-Token: [REDACTED]; url ?pwd=[REDACTED], team perf-team"
    )
