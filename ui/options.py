"""The CLI's argument types for what click does not check: `Number`, a finite number in a range
(click's FloatRange takes `nan` and `inf`, which pass every comparison), and `OutputFile`, a
file this command will write, checked before any work (its folder exists and is writable, it
is not a folder), so a run is never lost to a typo in `--json`."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import click


class Number(click.FloatRange):
    """A finite float in [min, max] (bounds open when asked); `nan`, `inf` refused by name."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class OutputFile(click.Path):
    """A file the command will write: its folder must exist and be writable and the path must
    not be a folder; checked when the command line is read, before any work starts."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(os.fsdecode(value))
        if path.is_dir():
            self.fail(f"{str(path)!r} is a folder, not a file", param, ctx)
        folder = path.parent if str(path.parent) else Path()
        if not folder.is_dir():
            self.fail(f"{str(path)!r}: the folder {str(folder)!r} does not exist", param, ctx)
        writable = os.access(path, os.W_OK) if path.exists() else os.access(folder, os.W_OK)
        if not writable:
            self.fail(f"{str(path)!r} cannot be written (permission denied)", param, ctx)
        return super().convert(value, param, ctx)


class OutputFolder(click.Path):
    """A folder the command will write files into: it exists and is writable, or can be made."""

    def __init__(self) -> None:
        super().__init__(file_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(os.fsdecode(value))
        if path.exists() and not path.is_dir():
            self.fail(f"{str(path)!r} is a file, not a folder", param, ctx)
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not os.access(probe, os.W_OK):
            self.fail(f"{str(path)!r} cannot be written (permission denied)", param, ctx)
        return super().convert(value, param, ctx)
