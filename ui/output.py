"""How CLI commands write to stdout: rich tables as wide as the terminal, or, when stdout is a
pipe or a file, as wide as their content (rich's 80-column default cuts `d3f… │ rt-…`); and the
plain form (tab-separated, one header line) that scripts read."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console

# Wide enough that no table is folded or cut: rich sizes a table to its content below it.
PIPE_WIDTH = 100_000
FORMATS = ("table", "plain", "json")


def stdout_console() -> Console:
    """A console for stdout: the terminal's width, or the content's when not a terminal."""
    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)


def plain_line(cells: Sequence[object]) -> str:
    """One tab-separated line; tabs and newlines inside a cell become spaces."""
    return "\t".join(" ".join(str(c).split()) if c is not None else "" for c in cells)


def write_plain(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    sys.stdout.write("\n".join(plain_line(r) for r in [header, *rows]) + "\n")
