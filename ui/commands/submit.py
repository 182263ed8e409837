"""`peakload submit SPEC [--wait] [--json FILE]`: a distributed run on the Celery workers of each
region. Returns once the synchronized start is set (or aborted with a reason); `--wait` follows
per-region progress to the end and prints the same summary as `peakload run`, per region too.

Exit codes as `peakload run` (analysis.verdicts.exitcodes): with --wait the run judged against its
spec's criteria, 0 passed, 1 criteria failed, 3 undecidable or empty, 4 invalid, 5 partial,
aborted or failed; without --wait 0 once it started; 5 aborted before the start; 2 bad input or
infrastructure error.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from analysis.verdicts.exitcodes import Exit
from loadgen.checks.specfile import load_spec
from loadgen.errors import PeakloadError
from ui.options import Number, OutputFile
from ui.output import stdout_console
from ui.people import owner_option


def _workers_option(values: tuple[str, ...]) -> dict[str, int] | None:
    out: dict[str, int] = {}
    for v in values:
        name, sep, n = v.partition("=")
        if not sep or not n.isdigit() or int(n) < 1:
            raise click.BadParameter(
                f"expected REGION=N with N >= 1, got {v!r}", param_hint="--workers"
            )
        out[name] = int(n)
    return out or None


@click.command("submit")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--wait", is_flag=True, help="follow progress to the end and print the summary")
@click.option(
    "--json",
    "json_out",
    type=OutputFile(),
    help="with --wait: write the summary as JSON",
)
@click.option(
    "--workers",
    "workers",
    multiple=True,
    metavar="REGION=N",
    help="worker slots (shards) for a region, overriding the spec",
)
@click.option(
    "--ready-timeout",
    type=Number(0, 86_400, min_open=True),
    default=60.0,
    show_default=True,
    help="seconds for every shard to check in before the run is aborted",
)
@click.option("--no-preflight", is_flag=True, help="skip the streaming check and calibration")
@click.option("--no-probe", is_flag=True, help="do not probe the spec's parameters first")
@click.option("--quiet", is_flag=True, help="no live table")
@click.option(
    "--owner",
    metavar="NAME",
    help="who launched the run, kept with it (default: the OS user running this command)",
)
def submit_command(
    spec_path: str,
    wait: bool,
    json_out: str | None,
    workers: tuple[str, ...],
    ready_timeout: float,
    no_preflight: bool,
    no_probe: bool,
    quiet: bool,
    owner: str | None,
) -> None:
    """Run SPEC across the region workers (PEAKLOAD_REDIS_URL, PEAKLOAD_DATABASE_URL)."""
    from ui.estimate import print_estimate
    from workers.coordinator import Coordinator, SubmitOptions

    console = stdout_console()
    if json_out and not wait:
        raise click.UsageError("--json needs --wait (the summary exists once the run ends)")
    launched_by = owner_option(owner)
    try:
        spec = load_spec(spec_path)
        print_estimate(spec, console)
        coord = Coordinator.from_env()
        probe_result = None
        if not no_probe:
            from loadgen.checks import hosted
            from workers.param_probe import checked_probe

            hosted.guard(spec)  # a run its provider's limits refuse sends not even the probe
            probe_result = checked_probe(spec, allow_private=False)  # as the workers' policy
        opts = SubmitOptions(
            workers_per_region=_workers_option(workers),
            ready_timeout_s=ready_timeout,
            preflight=not no_preflight,
            launched_by=launched_by,
        )
        launch = coord.submit(spec, opts)
        if probe_result is not None:
            from workers.store.connect import connect_store
            from workers.store.probes import save_probe

            with connect_store(coord.database_url, autocommit=True) as conn:
                save_probe(conn, launch.run_id, probe_result)
        if not launch.started:
            click.echo(
                f"peakload submit: run {launch.run_id} aborted before the start: {launch.reason}",
                err=True,
            )
            sys.exit(Exit.PARTIAL)
        console.print(f"run [bold]{launch.run_id}[/] started on {len(launch.plans)} shard(s)")
        if not wait:
            # started, not ended, nothing judged: the table's "has not ended" (5), never a pass
            console.print(
                f"not waiting: nothing judged yet (exit {int(Exit.PARTIAL)}); "
                f"`peakload report {launch.run_id}` once it ends"
            )
            sys.exit(Exit.PARTIAL)
        code = _follow(coord, launch.run_id, console, json_out, quiet)
    except PeakloadError as exc:
        click.echo(f"peakload submit: {exc}", err=True)
        sys.exit(Exit.BAD_INPUT)
    sys.exit(code)


def _follow(coord: object, run_id: str, console: Console, json_out: str | None, quiet: bool) -> int:
    from analysis.stats.regions import network_breakdown
    from ui.results import print_summary, summarize_run, summary_exit_code, write_json
    from workers.coordinator import Coordinator
    from workers.progress import progress_table
    from workers.store.connect import connect_store

    assert isinstance(coord, Coordinator)
    with Live(console=console, transient=True, auto_refresh=False) as live:

        def show(regions: list[dict[str, object]]) -> None:
            if not quiet:
                live.update(progress_table(run_id, regions), refresh=True)

        status = coord.wait(run_id, on_progress=show)
    summary = summarize_run(run_id, coord.database_url)
    with connect_store(coord.database_url, autocommit=True) as conn:
        net = network_breakdown(conn, run_id)
        row = conn.execute("SELECT status_reason FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    summary["status"] = status
    summary["status_reason"] = row[0] if row else None
    summary["network_by_region"] = net
    if json_out:
        write_json(summary, json_out)
    if not quiet:
        print_summary(summary, console)
        console.print(network_table(net))
        console.print(
            f"run [bold]{run_id}[/] {status}"
            + (f": {summary['status_reason']}" if summary["status_reason"] else "")
        )
    return summary_exit_code(summary)


def network_table(rows: list[dict[str, Any]]) -> Table:
    """analysis.stats.regions.network_breakdown's rows as a table."""
    t = Table(title="TTFT by region: network round trip, connection setup, server time (ms)")
    for col in (
        "region",
        "TTFT p50",
        "network RTT",
        "conn setup",
        "server",
        "start skew",
        "clock ±",
    ):
        t.add_column(col, justify="left" if col == "region" else "right")

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    for r in rows:
        t.add_row(
            r["region"] + (" (clock suspect)" if r["clock_suspect"] else ""),
            f(r["ttft_p50_ms"]),
            f(r["network_rtt_ms"]),
            f(r["connection_setup_ms"]),
            f(r["server_time_ms"]),
            f(r["start_skew_max_ms"]),
            f(r["clock_uncertainty_max_ms"]),
        )
    return t
