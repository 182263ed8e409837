"""Plain httpx clients for the sim tests: one streaming request, its raw reads and SSE events."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Streamed:
    status: int
    headers: httpx.Headers
    reads: list[bytes] = field(default_factory=list)
    error: Exception | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.reads)

    @property
    def data(self) -> list[str]:
        """The `data:` payloads of the SSE events, in order."""
        text = self.body.decode("utf-8", errors="replace")
        return [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(d) for d in self.data if d != "[DONE]"]

    def deltas(self, key: str = "content") -> list[str]:
        out = []
        for c in self.chunks:
            for choice in c.get("choices", []):
                value = choice.get("delta", {}).get(key)
                if value:
                    out.append(value)
        return out


def chat_body(
    max_tokens: int = 5, stream: bool = True, words: int = 4, **extra: Any
) -> dict[str, Any]:
    prompt = " ".join(f"w{i}" for i in range(words))
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }


def stream_post(
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    max_reads: int | None = None,
    timeout_s: float = 10.0,
) -> Streamed:
    """POST and read the raw body read by read; a transport error is kept, not raised."""
    with (
        httpx.Client(timeout=timeout_s) as client,
        client.stream("POST", url, json=body, headers=headers or {}) as r,
    ):
        out = Streamed(r.status_code, r.headers)
        try:
            for raw in r.iter_raw():
                out.reads.append(raw)
                if max_reads is not None and len(out.reads) >= max_reads:
                    break
        except httpx.TransportError as e:
            out.error = e
        return out
