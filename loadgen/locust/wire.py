"""The wire between a Locust process and its peakload engine process: JSON frames, each a 4-byte
big-endian length and an orjson body, over one Unix socket pair. Shared by both sides so neither
copies the framing.

Locust -> engine: `start` (run id, shard, spec, level), `level`, `req`, `stop`.
Engine -> Locust: `ready`, `started` (or `error`), `done` (one per answered `req`), `stopped`.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024  # a frame this large is a bug, not a message


class WireError(Exception):
    """The other side sent something that is not a frame (or died mid-frame)."""


def pack(message: dict[str, Any]) -> bytes:
    body = orjson.dumps(message)
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    (n,) = HEADER.unpack(header)
    if n > MAX_FRAME_BYTES:
        raise WireError(f"frame of {n} bytes exceeds {MAX_FRAME_BYTES}")
    return int(n)


def unpack(body: bytes) -> dict[str, Any]:
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"not a JSON frame: {exc}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise WireError("a frame must be an object with an `op`")
    return msg
