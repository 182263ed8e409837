"""The sim's `trickle` fault: a valid SSE stream written one byte at a time (slowloris from the
server's side). `TrickleBody` holds the whole stream's bytes and hands them out one per write,
with the token count each write completes; `sim/stream.py` times the writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.sim import text
from loadgen.sim.formats import Format
from loadgen.sim.http import LAST_CHUNK, chunk


@dataclass(slots=True)
class TrickleBody:
    body: bytes
    token_ends: dict[int, int]  # byte offset just past a token's event -> 1
    pos: int = field(default=0)

    @classmethod
    def of(
        cls, fmt: Format, chat: bool, offset: int, prompt_tokens: int, max_tokens: int
    ) -> TrickleBody:
        """Every token's content event (after the role event in chat), then the usual tail."""
        body = fmt.role_event() if chat else b""
        ends: dict[int, int] = {}
        for i in range(max_tokens):
            body += fmt.content_event(text.token_bytes(offset, i, i > 0), "content")
            ends[len(body)] = 1
        full = text.output_text(offset, 0, max_tokens)
        body += fmt.tail("length", prompt_tokens, max_tokens, None, False, None, True, full)
        return cls(body, ends)

    def next_write(self) -> tuple[bytes, int, bool]:
        """The next byte as one HTTP chunk (with the last chunk after the final byte), the tokens
        it completes, and whether the stream is done."""
        pos = self.pos
        self.pos = pos + 1
        done = self.pos == len(self.body)
        payload = chunk(self.body[pos : pos + 1]) + (LAST_CHUNK if done else b"")
        return payload, self.token_ends.get(pos + 1, 0), done
