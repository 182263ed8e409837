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
from loadgen.checks.specfile import load_spec
from loadgen.engine.livemetrics import (
    DEFAULT_HOST,
    DEFAULT_LINGER_S,
    LiveMetrics,
)
from loadgen.errors import PeakloadError, RunFailed
from loadgen.results.records import Tick
from loadgen.runspec.spec import RunSpec
from ui.estimate import print_estimate
from ui.options import OutputFile
from ui.output import stdout_console
from ui.people import owner_option
from workers.local_procs import default_processes

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
    processes: int = 1,
    metrics: LiveMetrics | None = None,
    otlp_endpoint: str | None = None,
    launched_by: str | None = None,
    preflight: bool = True,
) -> int:
    """Run, store, summarise; returns the exit code (shared by `run` and `demo`). With `probe`,
    the spec's request parameters are probed first and a rejected one refuses the run; with
    `metrics` (started), the run's records and ticks are served live there too; with
    `otlp_endpoint`, the stored run's metrics are pushed there at the end (a failed push is
    reported, and the run's own exit code kept: the measurement is stored regardless)."""
    # the summary's modules (pandas, scipy) and the run's own load only for a run that got this
    # far: a refused spec is answered without them
    from ui.results import print_summary, summarize_run, summary_exit_code, write_json
    from workers.local import run_local

    probe_result = None
    if probe:
        from workers.local import admit_local
        from workers.param_probe import checked_probe

        # a run refused by its limits or this machine sends not even the probe
        admit_local(spec, processes)
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

        result = run_local(
            spec,
            database_url=database_url,
            on_tick=on_tick,
            on_started=on_started,
            probe_result=probe_result,
            processes=processes,
            metrics=metrics,
            launched_by=launched_by,
            preflight=preflight,
        )
    summary = summarize_run(result.run_id, database_url)
    summary["status"] = result.status
    if otlp_endpoint:
        push_run(result.run_id, database_url, otlp_endpoint)
    if json_out:
        write_json(summary, json_out)
    if not quiet:
        print_summary(summary, console)
        console.print(
            f"run [bold]{result.run_id}[/] {result.status}; "
            f"{result.requests_scheduled} requests scheduled, all stored."
        )
    return summary_exit_code(summary)


def push_run(run_id: str, database_url: str | None, url: str) -> None:
    """The stored run's metrics as OTLP JSON, POSTed to `url`; a refusal is one line."""
    from analysis.reports.otlp import PushError, push_otlp, run_otlp
    from workers.store.connect import connect_store

    with connect_store(database_url, autocommit=True) as conn:
        payload, _ = run_otlp(conn, run_id)
    try:
        push_otlp(payload, url)
    except PushError as exc:
        click.echo(f"peakload run: {exc} (run {run_id} is stored)", err=True)


def otlp_url(text: str | None) -> str | None:
    """`--otlp-endpoint`: an http(s) URL, checked before anything runs."""
    if text is not None and not text.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{text!r} is not an http(s) URL (e.g. http://127.0.0.1:4318/v1/metrics)",
            param_hint="--otlp-endpoint",
        )
    return text


def process_count(text: str) -> int | None:
    """`--processes`: a count of at least 1, or None for `auto`; anything else is bad input."""
    if text.strip().lower() == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise click.BadParameter(
            f"{text!r} is neither a count >= 1 nor 'auto'", param_hint="--processes"
        )
    return n


@click.command("run")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", type=OutputFile(), help="write the summary as JSON")
@click.option("--quiet", is_flag=True, help="no progress bar or table")
@click.option("--no-probe", is_flag=True, help="do not probe the spec's parameters first")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="serve live Prometheus metrics on this port (0: a free one, printed)",
)
@click.option(
    "--metrics-host",
    default=DEFAULT_HOST,
    show_default=True,
    help="address the metrics server binds",
)
@click.option(
    "--metrics-linger",
    type=click.FloatRange(0, 3600),
    default=DEFAULT_LINGER_S,
    show_default=True,
    metavar="SECONDS",
    help="after the run, wait at most this long for one more scrape (the final counts)",
)
@click.option(
    "--otlp-endpoint",
    metavar="URL",
    help="after the run, push its metrics as OTLP JSON here (e.g. http://127.0.0.1:4318/v1/metrics)",
)
@click.option(
    "--no-preflight",
    is_flag=True,
    help="skip the streaming check and prompt calibration: the target sees the run's requests only",
)
@click.option(
    "--processes",
    default="1",
    metavar="N|auto",
    help="measuring processes (default 1: every shard in this process; auto: the cores this "
    "process may use, fewer for a small load)",
)
@click.option(
    "--owner",
    metavar="NAME",
    help="who launched the run, kept with it (default: the OS user running this command)",
)
def run_command(
    spec_path: str,
    json_out: str | None,
    quiet: bool,
    no_probe: bool,
    metrics_port: int | None,
    metrics_host: str,
    metrics_linger: float,
    otlp_endpoint: str | None,
    no_preflight: bool,
    processes: str,
    owner: str | None,
) -> None:
    """Run SPEC on this machine, store every record, print a table per load level."""
    console = terminal_console()
    launched_by = owner_option(owner)
    metrics = None
    ran = False  # the final scrape is waited for only after a run
    try:
        count = process_count(processes)
        otlp = otlp_url(otlp_endpoint)
        spec = load_spec(spec_path)
        n = default_processes(spec) if count is None else count
        if metrics_port is not None:
            metrics = serve_metrics(metrics_port, metrics_host)
        print_estimate(spec, console)
        code = execute(
            spec,
            console,
            json_out,
            quiet=quiet,
            probe=not no_probe,
            processes=n,
            metrics=metrics,
            otlp_endpoint=otlp,
            launched_by=launched_by,
            preflight=not no_preflight,
        )
        ran = True
    except RunFailed as exc:  # the run exists, marked failed with this reason
        ran = True
        click.echo(f"peakload run: {exc}", err=True)
        sys.exit(Exit.PARTIAL)
    except PeakloadError as exc:
        click.echo(f"peakload run: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    finally:
        if metrics is not None:
            if ran and metrics_linger > 0 and not quiet:
                click.echo(f"metrics: waiting up to {metrics_linger:g} s for a final scrape")
            metrics.wait_for_scrape(metrics_linger if ran else 0.0)
            metrics.stop()
    sys.exit(code)


def serve_metrics(port: int, host: str) -> LiveMetrics:
    """The live metrics server, started, its address printed (flushed: a reader waits for
    it)."""
    metrics = LiveMetrics()
    metrics.start(port, host)
    click.echo(f"metrics at {metrics.url}")
    sys.stdout.flush()
    return metrics
