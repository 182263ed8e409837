"""The `peakload` command: one click group; each command group lives in ui/commands/."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="peakload")
def cli() -> None:
    """peakload: load tests for LLM inference endpoints, measured token by token."""


def main() -> None:
    cli()


# Command registration: one line per command module (keep alphabetical).
