"""`peakload import TOOL PATH [--name NAME] [--label k=v ...]`: another tool's results as a stored
run (workers/imports). Exit 0 stored; 2 a bad file (one line naming the file and field), option or
store error, nothing written."""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import ValidationError

from loadgen.errors import SpecError, StoreError
from ui.commands.store_refs import fail

TOOL_NAMES = (
    "vllm",
    "guidellm",
    "aiperf",
    "inference-perf",
    "genai-bench",
)  # workers.imports.tools


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key.strip():
            fail(f"--label {v!r}: expected KEY=VALUE")
        out[key.strip()] = val.strip()
    return out


@click.command("import")
@click.argument("tool", type=click.Choice(TOOL_NAMES))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--name", help="the run's name (default TOOL-FILENAME)")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="a label (repeatable)")
@click.option("--base-url", help="the target's URL, when the tool's file does not record it")
@click.option("--tool-version", help="the tool's version, when its file does not record it")
def import_command(
    tool: str,
    path: Path,
    name: str | None,
    labels: tuple[str, ...],
    base_url: str | None,
    tool_version: str | None,
) -> None:
    """Store TOOL's results at PATH as a run every command reads (label load_driver = TOOL)."""
    from workers.imports.tools import import_run

    try:
        run_id, notes = import_run(
            tool, path, name=name, labels=_labels(labels), base_url=base_url, version=tool_version
        )
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        fail(f"{path}: the run it describes is not a valid spec ({where}: {first['msg']})")
    except (SpecError, StoreError) as e:
        fail(str(e))
    click.echo(
        f"imported {notes['requests']} requests from {notes['tool']} "
        f"{notes['tool_version'] or '(version unknown)'} as run {run_id}"
    )
    for line in notes["missing"]:
        click.echo(f"  not recorded: {line}")
