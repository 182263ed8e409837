"""Newline-delimited JSON framing (Ollama's streams): one JSON object per line, lines split
anywhere across reads; and raw framing (speech's audio body: each read one payload). The SSE
framing is `sse.SSEParser`; all offer `feed` and `finish`."""

from __future__ import annotations

from loadgen.errors import StreamProtocolError

MAX_LINE_BYTES = 16 * 1024 * 1024


class NDJSONParser:
    """Feed bytes as they arrive; get back every complete non-blank line (without its `\\n`)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        end = buf.rfind(b"\n")
        if end < 0:
            if len(buf) > MAX_LINE_BYTES:
                raise StreamProtocolError(f"NDJSON line longer than {MAX_LINE_BYTES} bytes")
            self._buf = buf
            return []
        self._buf = buf[end + 1 :]
        if end == len(buf) - 1 and buf.count(b"\n") == 1:  # the usual read: one whole line
            line = buf[:end].strip()
            return [line] if line else []
        return [ln for ln in (x.strip() for x in buf[:end].split(b"\n")) if ln]

    def finish(self) -> tuple[list[bytes], bool]:
        """At EOF: a last line without its newline still counts (servers may omit it)."""
        tail = self._buf.strip()
        self._buf = b""
        return ([tail] if tail else []), False


class RawParser:
    """A body that is its own payload (speech's raw audio): every read is one payload."""

    __slots__ = ()

    def feed(self, data: bytes) -> list[bytes]:
        return [data] if data else []

    def finish(self) -> tuple[list[bytes], bool]:
        return [], False
