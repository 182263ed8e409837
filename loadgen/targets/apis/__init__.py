"""Wire APIs above the transport: each module builds one API's request from a `PreparedRequest`
and decodes its response (framed as SSE or NDJSON) into `StreamEvent`s. `api_for(name)` gives
the one a spec's `target.api` names.
"""

from __future__ import annotations

from loadgen.targets.apis.base import CHAT_APIS, Api, Decoder, is_chat


def api_for(name: str) -> Api:
    """The API a spec's `target.api` names (ValueError for an unknown one)."""
    from loadgen.targets.apis import (
        llamacpp,
        ollama,
        openai_api,
        responses,
        speech,
        tgi,
        transcription,
        triton,
    )

    table: dict[str, Api] = {
        "openai-chat": openai_api.OpenAIChat(),
        "openai-completions": openai_api.OpenAICompletions(),
        "openai-responses": responses.OpenAIResponses(),
        "ollama-chat": ollama.OllamaApi(chat=True),
        "ollama-generate": ollama.OllamaApi(chat=False),
        "tgi-generate": tgi.TGIGenerate(),
        "llamacpp-completion": llamacpp.LlamaCppCompletion(),
        "triton-generate": triton.TritonGenerate(),
        "openai-speech": speech.OpenAISpeech(),
        "openai-transcription": transcription.OpenAITranscription(),
    }
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown api {name!r} (known: {', '.join(table)})") from None


__all__ = ["CHAT_APIS", "Api", "Decoder", "api_for", "is_chat"]
