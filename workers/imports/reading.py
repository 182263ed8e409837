"""Reading a tool's result files: JSON and JSON lines, each error naming the file (and line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workers.imports.mapping import ImportFileError


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ImportFileError(str(path), "", f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ImportFileError(str(path), "", f"not UTF-8 text (byte {e.start})") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportFileError(str(path), f"line {e.lineno}", f"not JSON: {e.msg}") from e


def read_jsonl(path: Path) -> list[Any]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ImportFileError(str(path), "", f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ImportFileError(str(path), "", f"not UTF-8 text (byte {e.start})") from e
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ImportFileError(str(path), f"line {i}", f"not JSON: {e.msg}") from e
    return out


def as_dict(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ImportFileError(str(path), where, f"expected an object, got {type(value).__name__}")
    return value


def as_list(value: Any, path: Path, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ImportFileError(str(path), where, f"expected a list, got {type(value).__name__}")
    return value
