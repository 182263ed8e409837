"""The `peakload` command: one click group whose commands live in ui/commands/, one module each.

Commands are imported only when invoked (pandas, scipy, Celery and Streamlit are slow to import),
from the explicit table below: add a line there for a new command.

The one error boundary of the CLI: a `PeakloadError` (or a database driver error) that a
command does not handle itself is printed as one line naming the command, and the process
exits with the shared code for bad input or infrastructure (analysis.verdicts.exitcodes: 2). No user
input reaches a traceback. What the process prints passes through loadgen.scrub.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import PeakloadError
from loadgen.scrub import ScrubbingStream

# name -> (module, attribute, one-line help shown by `peakload --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "abort": ("ui.commands.abort", "abort_command", "Abort a run, local or distributed."),
    "compare": ("ui.commands.compare", "compare_command", "Compare a candidate run to a baseline."),
    "db": ("ui.commands.db", "db", "The store: migrate, status, stop the embedded server."),
    "demo": ("ui.commands.demo", "demo_command", "A short sweep against the simulated engine."),
    "export": (
        "ui.commands.export",
        "export_command",
        "Export requests (csv, parquet, jsonl) or metrics (otlp).",
    ),
    "import": (
        "ui.commands.importrun",
        "import_command",
        "Store another tool's results (vLLM, GuideLLM, AIPerf, ...) as a run.",
    ),
    "nightly": (
        "ui.commands.nightly",
        "nightly_command",
        "A metric across a schedule's runs, with change points.",
    ),
    "note": ("ui.commands.annotate", "note_command", "Add a note to a stored run."),
    "presets": (
        "ui.commands.presets",
        "presets_command",
        "Engine and provider presets: protocol, URL, key, metrics, prices.",
    ),
    "probe": (
        "ui.commands.probe",
        "probe_command",
        "Which request parameters a target honours, ignores or rejects.",
    ),
    "report": ("ui.commands.report", "report_command", "Report on a run: HTML, JSON, figures."),
    "run": ("ui.commands.run", "run_command", "Run a spec in this process and store everything."),
    "runs": ("ui.commands.runs", "runs_command", "List stored runs, newest first."),
    "schedule": ("ui.commands.schedule", "schedule_group", "Nightly runs on a cron schedule."),
    "sim": ("ui.commands.sim", "sim", "Serve the simulated OpenAI-compatible engine."),
    "sla": ("ui.commands.sla", "sla_command", "Check SLA claims against a run."),
    "submit": ("ui.commands.submit", "submit_command", "Run a spec across the region workers."),
    "tag": ("ui.commands.annotate", "tag_command", "Tag a stored run (or take a tag off)."),
    "ui": ("ui.commands.ui", "ui_command", "Serve the web app."),
    "users": ("ui.commands.users", "users_group", "People who may log in to the UI, and roles."),
    "worker": ("ui.commands.worker", "worker_command", "Start a region worker (or control, beat)."),
}


class LazyGroup(click.Group):
    """Lists commands from `COMMANDS` and imports one only when it is run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), f"{module}.{attr} is not a click command"
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PeakloadError as exc:
            _fail(ctx, str(exc))
        except Exception as exc:
            if not type(exc).__module__.startswith("psycopg"):
                raise
            _fail(ctx, f"store error: {str(exc).strip() or type(exc).__name__}")

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _fail(ctx: click.Context, message: str) -> None:
    name = ctx.invoked_subcommand
    click.echo(f"peakload{' ' + name if name else ''}: {message}", err=True)
    sys.exit(Exit.BAD_INPUT)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="peakload")
def cli() -> None:
    """peakload: load tests for LLM inference endpoints, measured token by token."""


def main() -> None:
    """The console script; everything the process prints is scrubbed (loadgen.scrub). An
    interrupt (Ctrl-C) that reaches here (during the probe, or a second one while a run stops)
    exits PARTIAL, "aborted", by the one table, not click's 1
    (which means criteria failed); click's own usage errors keep their code 2 (bad input)."""
    sys.stdout = ScrubbingStream(sys.stdout)
    sys.stderr = ScrubbingStream(sys.stderr)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # click turns KeyboardInterrupt into Abort
        click.echo("\npeakload: interrupted; nothing judged", err=True)
        sys.exit(Exit.PARTIAL)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("\npeakload: interrupted; nothing judged", err=True)
        sys.exit(Exit.PARTIAL)
