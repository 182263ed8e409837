"""`probe`: small requests that exercise exactly what a spec will send, and a verdict per
parameter: honoured (its effect shows), accepted (taken; its effect cannot be seen from here),
ignored (taken, but the response shows it had no effect: no logprobs, output longer than the
cap, fewer choices than `n`, output that breaks the schema), rejected (the server's error), or
inconclusive (rate limited, a server error, a response that cannot tell). The client and
verdicts: loadgen.targets.prober; one check per parameter: loadgen.targets.probe_checks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from loadgen.runspec.secrets import resolve_target
from loadgen.runspec.spec import RunSpec
from loadgen.runspec.target_spec import SPEECH_API, TRANSCRIPTION_API, TargetSpec
from loadgen.scrub import scrub
from loadgen.targets.apis import is_chat
from loadgen.targets.factory import build_target
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.policy import policy_from_env
from loadgen.targets.preflight import reach
from loadgen.targets.probe_checks import CHECK_FUNCS, generic
from loadgen.targets.prober import (
    ACCEPTED,
    HONOURED,
    IGNORED,
    INCONCLUSIVE,
    OPENAI_APIS,
    REJECTED,
    Prober,
    ProbeResult,
    Verdict,
)

__all__ = ["ACCEPTED", "CHECKS", "HONOURED", "IGNORED", "INCONCLUSIVE", "REJECTED",
           "ProbeResult", "Verdict", "probe", "probe_sync", "spec_checks"]  # fmt: skip

KEY_CHECKS = {"n": "n", "logprobs": "logprobs", "top_logprobs": "logprobs",
              "logit_bias": "logit_bias", "seed": "seed", "stop": "stop", "tools": "tools",
              "tool_choice": "tools", "response_format": "response_format",
              "reasoning_effort": "reasoning_effort", "ignore_eos": "ignore_eos",
              # stream options only go with a stream (vLLM rejects them on a whole answer)
              "stream_options": "include_usage"}  # fmt: skip
CHECKS = ("stream", "include_usage", "max_tokens", "max_completion_tokens", "ignore_eos", "n",
          "logprobs", "logit_bias", "seed", "stop", "tools", "response_format",
          "tools_with_schema", "reasoning_effort")  # fmt: skip


CHAT_ONLY = {"tools", "response_format", "tools_with_schema", "reasoning_effort",
             "max_completion_tokens"}  # fmt: skip


def spec_checks(spec: RunSpec) -> tuple[list[str], dict[str, Any]]:
    """The checks covering what this spec will send, and the spec's own values of its keys.
    The audio APIs (speech, transcription) take none of the text parameters probed: none."""
    t = spec.target
    if t.api in (SPEECH_API, TRANSCRIPTION_API):
        return [], {}
    names = ["stream"] if t.stream else []
    if t.stream and t.include_usage:
        names.append("include_usage")
    names.append(t.max_tokens_field if is_chat(t.api) else "max_tokens")
    if t.ignore_eos:
        names.append("ignore_eos")
    extra = {**spec.labels.generation, **t.extra_body}
    out = spec.workload.output
    if out is not None and out.json_schema is not None:  # goes out with every request
        extra["response_format"] = {"type": "json_schema"}
    elif out is not None:
        extra.update(tools=out.tools, tool_choice=out.tool_choice)
    for key in extra:
        names.append(KEY_CHECKS.get(key, f"key:{key}"))
    if "tools" in extra and "response_format" in extra:
        names.append("tools_with_schema")
    return list(dict.fromkeys(names)), extra


async def probe(
    target: OpenAITarget, checks: list[str] | None = None, extra: dict[str, Any] | None = None
) -> ProbeResult:
    """Run `checks` (default: all that apply to the target's API), one after another, once
    the target is reachable (PreflightError naming the cause otherwise; also when it connects
    but never answers: loadgen.targets.prober.Silent)."""
    await reach(target)
    p = Prober(target, extra)
    api = target.spec.api
    result = ProbeResult(
        target=target.display_url,
        api=api,
        model=target.spec.model,
        probed_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    names = list(checks) if checks is not None else list(CHECKS)
    for name in names:
        if name.startswith("key:"):
            key = name.removeprefix("key:")
            if api not in OPENAI_APIS:
                result.verdicts.append(Verdict(key, INCONCLUSIVE, f"not probed for {api}"))
                continue
            result.verdicts.append(await generic(key, p.extra.get(key))(p))
            continue
        fn = CHECK_FUNCS[name]
        if name in ("stream", "include_usage", "max_tokens"):  # through the target: every API
            if name == "include_usage" and api not in OPENAI_APIS:
                continue
        elif api not in OPENAI_APIS:
            result.verdicts.append(Verdict(name, INCONCLUSIVE, f"not probed for {api}"))
            continue
        elif name in CHAT_ONLY and not p.chat:
            continue
        result.verdicts.append(await fn(p))
    for v in result.verdicts:  # a server's answer may echo our headers or URL
        v.detail = scrub(v.detail)
    result.target = scrub(result.target)
    return result


def probe_sync(
    target_spec: TargetSpec,
    checks: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    *,
    allow_private: bool = True,
) -> ProbeResult:
    """`probe` on a fresh event loop with its own target (for commands), after the target
    policy's check (PolicyError): `allow_private` as the run it precedes would allow (a local
    run: the operator's own network; link-local and metadata addresses stay refused).
    `headers_env` headers are filled in from this process's environment, as for the run's
    sender (SpecError naming an unset variable): a probe without the run's credentials would
    judge the wrong request."""
    sending = resolve_target(target_spec)
    policy = policy_from_env()
    if allow_private:
        policy = policy.allowing_private()

    async def main() -> ProbeResult:
        target = build_target(sending, policy, max_connections=2).client
        try:
            return await probe(target, checks, extra)
        finally:
            await target.aclose()

    return asyncio.run(main())
