"""What a completion request asked the simulated engine for, after validation: filled in by the
server (server._fill_plan), followed by the completion that answers it (stream.Completion).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Plan:
    """What the request asked for, after validation."""

    request_id: str
    path: str
    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int
    keep_alive: bool
    headers_ns: int
    request_ns: int
    api: str = "openai-chat"  # which wire API (loadgen.sim.protocols.route)
    effects: dict[str, Any] = field(default_factory=dict)  # honoured parameters (sim.params)
    extra_headers: dict[str, str] = field(default_factory=dict)  # e.g. advertised rate limits
    echo: str = ""  # an echoing gateway's quote of the request, added to error messages
    audio: dict[str, Any] = field(default_factory=dict)  # the audio APIs' settings (sim.audio)

    def head_headers(self) -> dict[str, str]:
        """The response head's own headers: the request id echoed, then the plan's extras."""
        return {"x-peakload-request-id": self.request_id, **self.extra_headers}
