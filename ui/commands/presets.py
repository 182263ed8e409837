"""`peakload presets [NAME] [--json]`: the engine and provider presets a spec can name with
`[target] preset = "..."` (loadgen/presets/*.toml), listed or shown one in full."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import SpecError
from loadgen.runspec.presets import Preset, all_presets, load_preset


def _price_text(p: Preset) -> str:
    if p.prices is None:
        return "-"
    first = ", ".join(
        f"{m} ${mp.audio_per_hour:g}/audio hour"
        if mp.input_per_mtok is None
        else f"{m} ${mp.input_per_mtok:g}/${mp.output_per_mtok:g}"
        for m, mp in p.prices.models.items()
    )
    return f"{first} (per Mtok in/out, {p.prices.as_of.isoformat()})"


@click.command("presets")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
def presets_command(name: str | None, as_json: bool) -> None:
    """List the presets, or show NAME in full."""
    if name is not None:
        try:
            preset = load_preset(name)
        except SpecError as e:
            click.echo(f"Error: {e}", err=True)
            raise SystemExit(Exit.BAD_INPUT) from None
        click.echo(json.dumps(preset.model_dump(mode="json"), indent=2 if not as_json else None))
        return
    presets = all_presets()
    if as_json:
        click.echo(json.dumps([p.model_dump(mode="json") for p in presets]))
        return
    table = Table(title="presets (\\[target] preset = NAME; any field may be overridden)")
    for col in ("name", "kind", "protocol", "base_url", "key env", "metrics", "list prices"):
        table.add_column(col, overflow="fold")
    for p in presets:
        table.add_row(
            p.name,
            p.kind,
            p.protocol,
            p.base_url or p.base_url_hint,
            p.auth.env or "-",
            p.metrics.path if p.metrics else "-",
            _price_text(p),
        )
    Console(width=200).print(table)
