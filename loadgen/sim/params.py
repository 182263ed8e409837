"""What the simulated engine does with each request parameter a probe checks: reject it (HTTP
400 naming it), ignore it (answer as if it were absent) or honour it (its effect shows in the
response), set per parameter with `--param NAME=reject|ignore|honour`. Unset, the sim honours
the stream, usage, output cap and ignore_eos, and ignores the rest (as it always did).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any, Literal

from loadgen.sim import text
from loadgen.sim.plan import Plan

Mode = Literal["reject", "ignore", "honour"]
PARAMS = ("stream", "include_usage", "max_tokens", "max_completion_tokens", "ignore_eos", "n",
          "logprobs", "logit_bias", "seed", "stop", "tools", "response_format",
          "tools_with_schema", "reasoning_effort")  # fmt: skip
DEFAULT_HONOURED = ("stream", "include_usage", "max_tokens", "max_completion_tokens", "ignore_eos")
EARLY_EOS_TOKENS = 2  # where the simulated model "stops" when ignore_eos is not honoured


def parse_param(spec: str) -> tuple[str, Mode]:
    """`NAME=MODE` from the command line (ValueError naming what is wrong)."""
    name, _, mode = spec.partition("=")
    if name not in PARAMS:
        raise ValueError(f"unknown parameter {name!r} (known: {', '.join(PARAMS)})")
    if mode not in ("reject", "ignore", "honour"):
        raise ValueError(f"{spec!r}: the mode must be reject, ignore or honour")
    return name, mode  # type: ignore[return-value]


def mode_of(params: Mapping[str, str], name: str) -> str:
    return params.get(name, "honour" if name in DEFAULT_HONOURED else "ignore")


def present(body: dict[str, Any], name: str) -> bool:
    if name == "include_usage":
        opts = body.get("stream_options")
        return isinstance(opts, dict) and "include_usage" in opts
    if name == "tools_with_schema":
        return "tools" in body and "response_format" in body
    if name == "stream":
        return body.get("stream") is True
    return name in body


def check(params: Mapping[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The effects to apply to this request's answer; text.BadRequest for a rejected one."""
    effects: dict[str, Any] = {}
    for name in PARAMS:
        if not present(body, name):
            continue
        mode = mode_of(params, name)
        if mode == "reject":
            raise text.BadRequest(f"unsupported parameter: {name}")
        if mode == "honour":
            effects[name] = body.get(name)
    if mode_of(params, "ignore_eos") == "ignore":
        effects["early_eos"] = True  # the model stops on its own, whatever was asked
    return effects


def plan_tokens(effects: dict[str, Any], params: Mapping[str, str], asked: int) -> int:
    """Tokens to generate for an output cap of `asked`."""
    cap_ignored = any(
        mode_of(params, k) == "ignore" for k in ("max_tokens", "max_completion_tokens")
    )
    n = asked * 2 if cap_ignored else asked  # the server used its own, larger cap
    if effects.get("early_eos") and "ignore_eos" not in effects:
        n = min(n, EARLY_EOS_TOKENS)
    return n


def _value(schema: Any, words: list[str]) -> Any:
    """A value that satisfies a (simple) JSON schema, built from the output's words."""
    if not isinstance(schema, dict):
        return " ".join(words)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _value(v, words) for k, v in props.items()}
    if kind == "array":
        return [_value(schema.get("items"), words)]
    if kind in ("integer", "number"):
        return len(words)
    if kind == "boolean":
        return True
    return " ".join(words)


def shaped_stream(
    plan: Plan, streaming: bool, offset: int, reasoning: int
) -> tuple[str | None, list[bytes]]:
    """A streamed chat answer (the tokens after `reasoning`, up to the plan's cap) shaped by an
    honoured schema, as a guided decoder streams it: (None, pieces) for `response_format`
    json_schema, (the forced function's name, pieces of its arguments) for `tools`; (None, [])
    when neither applies. The document is built from the answer's words (as `apply` does),
    padded with the whitespace JSON allows after a value when shorter, and split evenly over
    the tokens; each piece is escaped for a JSON string."""
    effects = plan.effects
    if not (streaming and plan.chat and ("response_format" in effects or "tools" in effects)):
        return None, []  # the common case, on the sim's hot path: nothing built
    words = [
        text.token_bytes(offset, reasoning + j, j != 0).decode().strip()
        for j in range(plan.max_tokens - reasoning)
    ]
    fmt = effects.get("response_format")
    tools = effects.get("tools")
    name: str | None = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
    elif isinstance(tools, list) and tools and isinstance(tools[0], dict):
        fn = tools[0].get("function") or {}
        name, schema = str(fn.get("name", "f")), fn.get("parameters")
    else:
        return None, []
    n = len(words)
    doc = json.dumps(_value(schema, words), ensure_ascii=False)
    doc += " " * max(0, n - len(doc))
    cuts = [len(doc) * i // n for i in range(n + 1)]
    return name, [json.dumps(doc[a:b])[1:-1].encode() for a, b in itertools.pairwise(cuts)]


def apply(effects: dict[str, Any], body: bytes) -> bytes:
    """A non-streaming chat/completions body with the honoured parameters' effects."""
    if not effects:
        return body
    obj = json.loads(body)
    choice = obj["choices"][0]
    msg = choice.get("message")
    content = msg.get("content", "") if msg is not None else choice.get("text", "")
    stop = effects.get("stop")
    if stop:
        for s in [stop] if isinstance(stop, str) else list(stop):
            if isinstance(s, str) and s and s in content:
                content = content[: content.index(s)]
                choice["finish_reason"] = "stop"
    words = content.split()
    fmt = effects.get("response_format")
    if msg is not None and isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        content = json.dumps(_value(schema, words))
    if msg is not None and effects.get("tools"):
        fn = effects["tools"][0].get("function", {}) if isinstance(effects["tools"], list) else {}
        call = {"id": "call_1", "type": "function",
                "function": {"name": fn.get("name", "f"), "arguments": "{}"}}  # fmt: skip
        msg["tool_calls"] = [call]
        choice["finish_reason"] = "tool_calls"
    if msg is not None:
        msg["content"] = content
    else:
        choice["text"] = content
    if effects.get("logprobs"):
        toks = [{"token": w, "logprob": -0.5, "bytes": list(w.encode()), "top_logprobs": []}
                for w in words]  # fmt: skip
        choice["logprobs"] = {"content": toks}
    n = effects.get("n")
    if type(n) is int and n > 1:
        obj["choices"] = [{**choice, "index": i} for i in range(n)]
    return json.dumps(obj, ensure_ascii=False).encode()
