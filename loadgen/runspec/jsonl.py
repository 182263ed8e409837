"""Reading the JSONL files a spec names (datasets, traces): each non-blank line parsed, and a
SpecError naming the file and the line for a folder, an unreadable file, bytes that are not
UTF-8, or a line that is not JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loadgen.errors import SpecError


def jsonl_rows(path: str | Path) -> Iterator[tuple[int, Any]]:
    """`(line number, value)` for each non-blank line of `path`, from 1."""
    p = Path(path)
    if p.is_dir():
        raise SpecError("is a folder, not a JSONL file", where=str(p))
    lineno = 0
    try:
        with p.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    msg = (
                        f"line {lineno}: not UTF-8 text (byte {raw[exc.start]:#04x} at {exc.start})"
                    )
                    raise SpecError(msg, where=str(p)) from None
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SpecError(f"line {lineno}: not JSON ({exc.msg})", where=str(p)) from None
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", where=str(p)) from None
