"""`peakload probe TARGET [--model M] [--spec FILE] [--json]`: per request parameter, whether
the target honours, accepts, ignores or rejects it (loadgen.targets.probe). TARGET is a base
URL, a preset name or a spec file. Exit 0 when nothing was rejected, 1 when something was,
2 on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
import httpx
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from analysis.verdicts.exitcodes import Exit
from loadgen.checks.specfile import load_spec
from loadgen.errors import PeakloadError, SpecError
from loadgen.runspec.presets import load_preset, preset_names
from loadgen.runspec.target_spec import TargetSpec
from loadgen.targets.http_common import display_url
from loadgen.targets.policy import policy_from_env
from loadgen.targets.probe import CHECKS, REJECTED, ProbeResult, probe_sync, spec_checks

COLOURS = {"honoured": "green", "accepted": "cyan", "ignored": "yellow", "rejected": "red"}


def _first_model(spec: TargetSpec) -> str:
    """The first model the server lists (OpenAI-style `GET /models`, beside the base URL's
    path: a query in it stays the query), within the spec's timeouts."""
    parts = urlsplit(spec.base_url)
    url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/models", fragment=""))
    limits = httpx.Timeout(spec.idle_timeout_s, connect=spec.connect_timeout_s)
    try:
        data = httpx.get(url, timeout=limits, trust_env=False).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        raise SpecError(f"no --model given and {display_url(url)} lists none", "--model") from None


def resolve(
    target: str, model: str | None, spec_file: str | None, api: str | None
) -> tuple[TargetSpec, list[str] | None, dict[str, Any]]:
    """The target spec to probe, the checks (None: all) and the spec's own values."""
    path = spec_file or (target if target.endswith(".toml") and Path(target).is_file() else None)
    if path is not None:
        run_spec = load_spec(path)
        t = run_spec.target
        if model:
            t = t.model_copy(update={"model": model})
        checks, extra = spec_checks(run_spec)
        return t, checks, extra
    fields: dict[str, Any] = {}
    if target in preset_names():
        fields = load_preset(target).target_defaults()
        fields["preset"] = target
    elif target.startswith(("http://", "https://")):
        fields = {"api": "openai-chat", "base_url": target}
    else:
        raise SpecError(
            f"{target!r} is not a URL, a preset ({', '.join(preset_names())}) or a spec file",
            "TARGET",
        )
    if api:
        fields["api"] = api
    fields["model"] = model or "?"
    try:
        spec = TargetSpec.model_validate(fields)
    except ValueError as e:
        raise SpecError(str(e).splitlines()[0], "TARGET") from None
    if not model:
        # the model list is a request too: the policy comes first
        policy_from_env().allowing_private().check(spec.base_url)
        spec = spec.model_copy(update={"model": _first_model(spec)})
    return spec, None, {}


def print_result(result: ProbeResult, console: Console) -> None:
    table = Table(title=f"probe of {result.target} ({result.api}, model {result.model})")
    for col in ("parameter", "verdict", "detail"):
        table.add_column(col, overflow="fold")
    for v in result.verdicts:
        colour = COLOURS.get(v.verdict, "white")
        table.add_row(v.param, f"[{colour}]{v.verdict}[/]", escape(v.detail))  # server text
    console.print(table)


@click.command("probe")
@click.argument("target")
@click.option("--model", help="Model id (default: the spec's, or the first the server lists).")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False), help="Probe what it sends.")
@click.option("--api", type=click.Choice(["openai-chat", "openai-completions"]), help="For a URL.")
@click.option("--check", "checks", multiple=True, type=click.Choice(CHECKS), help="Only these.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
def probe_command(
    target: str,
    model: str | None,
    spec_file: str | None,
    api: str | None,
    checks: tuple[str, ...],
    as_json: bool,
) -> None:
    """Which request parameters TARGET honours, accepts, ignores or rejects."""
    try:
        spec, spec_names, extra = resolve(target, model, spec_file, api)
        result = probe_sync(spec, list(checks) or spec_names, extra)
    except PeakloadError as e:
        click.echo(f"peakload probe: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        print_result(result, Console(width=None if sys.stdout.isatty() else 160))
    sys.exit(Exit.FAILED if any(v.verdict == REJECTED for v in result.verdicts) else Exit.PASSED)
