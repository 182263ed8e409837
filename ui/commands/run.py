"""`peakload run SPEC`: a run in this process with live progress, stored, then summarised.

Exit codes (analysis.verdicts.exitcodes, judged by analysis.verdicts.verdict against the spec's
`[[slos]]` and `max_error_rate`): 0 passed; 1 criteria failed; 3 undecidable (too few samples) or
empty; 4 measurement invalid (the self-check fired); 5 partial, aborted or failed (what was measured
is stored; a run that failed after its row was written says why); 2 bad input or infrastructure
error (nothing written).
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import PeakloadError, RunFailed
from loadgen.records import Tick
from loadgen.spec import RunSpec, load_spec
from ui.output import stdout_console
from ui.results import (
    print_estimate,
    print_summary,
    summarize_run,
    summary_exit_code,
    write_json,
)
from workers.local import LocalRun, run_local

EXIT_ERROR = Exit.BAD_INPUT


def terminal_console() -> Console:
    """A console as wide as the terminal, or as the content when piped (ui.output)."""
    return stdout_console()


def planned_seconds(spec: RunSpec) -> float:
    load = spec.load
    if load.concurrency is not None:
        return load.duration_s * len(load.concurrency)
    if load.rate is not None:
        return load.duration_s * len(load.rate)
    if load.saturation is not None:
        return load.duration_s * load.saturation.max_steps
    return load.duration_s


def execute(
    spec: RunSpec,
    console: Console,
    json_out: str | None,
    *,
    quiet: bool = False,
    database_url: str | None = None,
    probe: bool = False,
) -> int:
    """Run, store, summarise; returns the exit code (shared by `run` and `demo`). With `probe`,
    the spec's request parameters are probed first and a rejected one refuses the run."""
    probe_result = None
    if probe:
        from loadgen import hosted
        from workers.param_probe import checked_probe

        hosted.guard(spec)  # a run its provider's limits refuse sends not even the probe
        probe_result = checked_probe(spec)
    total = planned_seconds(spec)
    seen: dict[str, int] = {"done": 0, "errors": 0, "in_flight": 0}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as progress:
        task = progress.add_task(spec.name, total=total, stats="warming up")
        last_t: dict[str, int] = {}

        def on_tick(t: Tick) -> None:
            seen["done"] += t.completed
            seen["errors"] += t.errors
            last_t[t.shard_id] = t.in_flight
            elapsed = progress.tasks[0].elapsed or 0.0
            progress.update(
                task,
                completed=min(elapsed, total),
                stats=(
                    f"level {t.level}  done {seen['done']}  in flight {sum(last_t.values())}  "
                    f"errors {seen['errors']}"
                ),
            )

        def on_started(run_id: str) -> None:
            progress.update(task, stats=f"run {run_id}")

        result: LocalRun = run_local(
            spec,
            database_url=database_url,
            on_tick=on_tick,
            on_started=on_started,
            probe_result=probe_result,
        )
    summary = summarize_run(result.run_id, database_url)
    summary["status"] = result.status
    if json_out:
        write_json(summary, json_out)
    if not quiet:
        print_summary(summary, console)
        console.print(
            f"run [bold]{result.run_id}[/] {result.status}; "
            f"{result.requests_scheduled} requests scheduled, all stored."
        )
    return summary_exit_code(summary)


@click.command("run")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="write the summary as JSON"
)
@click.option("--quiet", is_flag=True, help="no progress bar or table")
@click.option("--no-probe", is_flag=True, help="do not probe the spec's parameters first")
def run_command(spec_path: str, json_out: str | None, quiet: bool, no_probe: bool) -> None:
    """Run SPEC in this process, store every record, print a table per load level."""
    console = terminal_console()
    try:
        spec = load_spec(spec_path)
        print_estimate(spec, console)
        code = execute(spec, console, json_out, quiet=quiet, probe=not no_probe)
    except RunFailed as exc:  # the run exists, marked failed with this reason
        click.echo(f"peakload run: {exc}", err=True)
        sys.exit(Exit.PARTIAL)
    except PeakloadError as exc:
        click.echo(f"peakload run: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code)
