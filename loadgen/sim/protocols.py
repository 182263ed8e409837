"""The simulated engine's wire APIs: `route(path)` names the API a path belongs to, `served`
whether `--protocol` answers it, and `request_fields(api, body, path)` reads what the engine
needs from a native API's request body (their stream formats: loadgen.sim.formats).
"""

from __future__ import annotations

from typing import Any

from loadgen.sim import text

NDJSON_TYPE = "application/x-ndjson"
SERVED = ("all", "openai", "openai-responses", "ollama", "tgi-generate", "llamacpp-completion",
          "triton-generate")  # fmt: skip
_FAMILY = {
    "openai-chat": "openai",
    "openai-completions": "openai",
    "ollama-chat": "ollama",
    "ollama-generate": "ollama",
    "openai-speech": "openai",
    "openai-transcription": "openai",
}


def route(path: str) -> str | None:
    """The API of a completion path, or None for other paths."""
    if path == "/v1/chat/completions":
        return "openai-chat"
    if path == "/v1/completions":
        return "openai-completions"
    if path == "/v1/responses":
        return "openai-responses"
    if path == "/v1/audio/speech":
        return "openai-speech"
    if path == "/v1/audio/transcriptions":
        return "openai-transcription"
    if path == "/api/chat":
        return "ollama-chat"
    if path == "/api/generate":
        return "ollama-generate"
    if path in ("/generate_stream", "/generate"):
        return "tgi-generate"
    if path == "/completion":
        return "llamacpp-completion"
    if path.startswith("/v2/models/") and path.endswith(("/generate_stream", "/generate")):
        return "triton-generate"
    return None


def served(protocol: str, api: str) -> bool:
    """Whether a sim started with `--protocol protocol` answers `api`."""
    return protocol == "all" or _FAMILY.get(api, api) == protocol


def base_path(protocol: str) -> str:
    """The base URL's path a spec needs for this protocol (OpenAI's: /v1; native: the root)."""
    return "/v1" if protocol in ("all", "openai", "openai-responses") else ""


def is_chat(api: str) -> bool:
    return api in ("openai-chat", "openai-responses", "ollama-chat")


def _words(value: Any, where: str) -> int:
    if isinstance(value, list):  # chat messages
        return text.chat_prompt_tokens({"messages": value})
    return text.count_words(value, where)


def request_fields(api: str, body: dict[str, Any], path: str, default_max: int) -> dict[str, Any]:
    """stream, max_tokens (None: the default), include_usage and prompt_tokens of a native
    request; raises text.BadRequest for a body the real server would refuse."""
    if api == "openai-responses":
        inp = body.get("input")
        if inp is None:
            raise text.BadRequest("'input' is required")
        return {
            "stream": body.get("stream", False),
            "max_tokens": body.get("max_output_tokens"),
            "include_usage": True,
            "prompt_tokens": _words(inp, "'input'"),
        }
    if api in ("ollama-chat", "ollama-generate"):
        opts = body.get("options") or {}
        if not isinstance(opts, dict):
            raise text.BadRequest("'options' must be an object")
        if api == "ollama-chat":
            prompt = text.chat_prompt_tokens(body)
        else:
            prompt = text.count_words(body.get("prompt", ""), "'prompt'")
        return {
            "stream": body.get("stream", True),  # Ollama streams unless told not to
            "max_tokens": opts.get("num_predict"),
            "include_usage": True,
            "prompt_tokens": prompt,
        }
    if api == "tgi-generate":
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise text.BadRequest("'parameters' must be an object")
        return {
            "stream": path == "/generate_stream",
            "max_tokens": params.get("max_new_tokens"),
            "include_usage": bool(params.get("details", False)),
            "prompt_tokens": text.count_words(body.get("inputs"), "'inputs'"),
        }
    if api == "llamacpp-completion":
        return {
            "stream": body.get("stream", False),
            "max_tokens": body.get("n_predict"),
            "include_usage": True,
            "prompt_tokens": text.count_words(body.get("prompt"), "'prompt'"),
        }
    if api == "triton-generate":
        return {
            "stream": path.endswith("/generate_stream"),
            "max_tokens": body.get("max_tokens", default_max),
            "include_usage": False,
            "prompt_tokens": text.count_words(body.get("text_input"), "'text_input'"),
        }
    raise text.BadRequest(f"no API at {path}")
