"""Locust mode, in one place: the Locust user and its listeners (`user`), the peakload
engine process behind it (`engine`), the Locust side of the wire to it (`client`), the
wire itself (`wire`) and the run spec of a Locust test (`spec`).

`from loadgen.locust import LLMUser` is the line users' locustfiles hold, so that one name
stays here; it is loaded on first use, so the other modules (the engine process, the spec)
import without Locust or gevent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.locust.user import LLMUser

__all__ = ["LLMUser"]


def __getattr__(name: str) -> Any:
    if name == "LLMUser":
        from loadgen.locust.user import LLMUser

        return LLMUser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
