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
from ui.commands.db import db  # noqa: E402

cli.add_command(db)
from ui.commands.demo import demo_command  # noqa: E402
from ui.commands.run import run_command  # noqa: E402

cli.add_command(demo_command)
cli.add_command(run_command)
from ui.commands.sim import sim  # noqa: E402
cli.add_command(sim)
from ui.commands.runs import runs_command  # noqa: E402
from ui.commands.sla import sla_command  # noqa: E402

cli.add_command(runs_command)
cli.add_command(sla_command)
from ui.commands.export import export_command  # noqa: E402

cli.add_command(export_command)
from ui.commands.abort import abort_command  # noqa: E402
from ui.commands.schedule import schedule_group  # noqa: E402
from ui.commands.submit import submit_command  # noqa: E402
from ui.commands.worker import worker_command  # noqa: E402

cli.add_command(abort_command)
cli.add_command(schedule_group)
cli.add_command(submit_command)
cli.add_command(worker_command)
from ui.commands.report import report_command  # noqa: E402

cli.add_command(report_command)
from ui.commands.compare import compare_command  # noqa: E402

cli.add_command(compare_command)
