"""Incremental Server-Sent Events parser over raw bytes: events may be split anywhere (mid-line,
mid-UTF-8) or arrive many per read. Yields each event's `data` payload as bytes (UTF-8 JSON is
decoded by the consumer, so a split code point is never decoded on its own).
"""

from __future__ import annotations

from loadgen.errors import StreamProtocolError

MAX_PENDING_BYTES = 16 * 1024 * 1024
"""An event larger than this (no blank line yet) is a protocol error, not a memory leak."""


class SSEParser:
    """Feed bytes as they arrive; get back the data payloads of every event they completed.

    Follows the WHATWG event-stream rules that matter for LLM APIs: lines end in `\\r\\n`, `\\n`
    or `\\r`; a blank line dispatches the event; `:` lines are comments; several `data:` lines
    join with `\\n`; one space after the colon is dropped; `event:`, `id:` and `retry:` are
    ignored; an event with no data is not dispatched; a final event without its blank line is
    dropped at EOF (the caller decides whether that is an error).
    """

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the previous feed ended in `\r`: it may be the first half of `\r\n`

    def feed(self, data: bytes) -> list[bytes]:
        """Consume `data`; return the payloads of the events it completed, in order."""
        if (  # the usual read: exactly one `data: ...` line and its blank line, nothing held
            not self._buf
            and not self._cr
            and data[:6] == b"data: "
            and data.find(b"\n") == len(data) - 2
            and data[-1] == 10
            and b"\r" not in data
        ):
            return [data[6:-2]]
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if b"\r" in data:
            if data[-1] == 13:  # hold a trailing CR until we know whether LF follows
                data = data[:-1]
                self._cr = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            if len(buf) > MAX_PENDING_BYTES:
                raise StreamProtocolError(
                    f"event-stream event larger than {MAX_PENDING_BYTES} bytes without a blank line"
                )
            self._buf = buf
            return []
        self._buf = buf[end + 2 :]
        out: list[bytes] = []
        for block in buf[:end].split(b"\n\n"):
            if block[:5] == b"data:" and b"\n" not in block:  # the common one-line event
                out.append(block[6:] if block[5:6] == b" " else block[5:])
            elif block:
                payload = _parse_block(block)
                if payload is not None:
                    out.append(payload)
        return out

    def finish(self) -> tuple[list[bytes], bool]:
        """At EOF: payloads completed only by a held trailing CR, and whether bytes of an
        unfinished event were left over (they are dropped, as the SSE rules say)."""
        out = self.feed(b"\n") if self._cr else []
        leftover = bool(self._buf.strip(b"\n"))
        self._buf = b""
        self._cr = False
        return out, leftover


def _parse_block(block: bytes) -> bytes | None:
    """One event's lines (without the blank line): its joined data, or None if it has none."""
    parts: list[bytes] | None = None
    for line in block.split(b"\n"):
        if not line or line[0] == 58:  # empty (extra blank lines) or a `:` comment
            continue
        if line[:5] == b"data:":
            value = line[6:] if line[5:6] == b" " else line[5:]
        elif line == b"data":
            value = b""
        else:
            continue  # event:, id:, retry: and unknown fields carry nothing we use
        if parts is None:
            parts = [value]
        else:
            parts.append(value)
    if parts is None:
        return None
    return parts[0] if len(parts) == 1 else b"\n".join(parts)
