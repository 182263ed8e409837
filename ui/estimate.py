"""What a run will send before it sends it: the requests, tokens and cost of a hosted or
paced run, printed by `peakload run` and `peakload submit`. Light to import on purpose: a
command that fails validation never loads pandas or scipy (ui.results does)."""

from __future__ import annotations

from rich.console import Console

from loadgen.checks import hosted
from loadgen.runspec.presets import load_preset
from loadgen.runspec.spec import RunSpec


def print_estimate(spec: RunSpec, console: Console) -> None:
    """Before a run against a hosted preset (or one that paces or caps its cost): the requests,
    tokens and cost it will send, on stderr-free stdout. Refusals come from loadgen.checks.hosted's
    guard, which the run itself calls."""
    preset = load_preset(spec.target.preset) if spec.target.preset else None
    hosted_target = preset is not None and preset.kind == "hosted"
    if not (hosted_target or spec.pacing.enabled or spec.cost.max_cost_usd is not None):
        return
    est = hosted.check(spec)
    where = f"{preset.title} ({preset.name})" if preset is not None else spec.target.base_url
    console.print(f"[bold]before the run[/] against {where}:")
    for line in est.lines():
        console.print(f"  {line}")
    if est.problems:
        state = "confirmed by the spec" if spec.cost.confirm_over_limits else "refused"
        for why in est.problems:
            console.print(f"  [bold red]over a limit[/] ({state}): {why}")
