"""`peakload tag RUN TAG [--remove]` and `peakload note RUN TEXT`: what people add to a stored
run (workers/store/run_notes.py), shown on the UI's Run page and in `peakload runs`. The author
is `--by NAME`, else the OS user (ui/people.py). RUN is an id, an id prefix or a unique name.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from analysis.verdicts.exitcodes import Exit
from ui.commands.store_refs import analysis_store, resolve_or_fail
from ui.people import owner_option
from workers.store import run_notes

BY_HELP = "who adds it (default: the OS user running this command)"


def _fail(command: str, message: str) -> NoReturn:
    click.echo(f"peakload {command}: {message}", err=True)
    sys.exit(Exit.BAD_INPUT)


@click.command("tag")
@click.argument("run_ref", metavar="RUN")
@click.argument("tag")
@click.option("--remove", is_flag=True, help="take the tag off instead")
@click.option("--by", "by", metavar="NAME", help=BY_HELP)
def tag_command(run_ref: str, tag: str, remove: bool, by: str | None) -> None:
    """Tag RUN with TAG (a short word: baseline, regression:tpot, …)."""
    try:
        run_notes.check_tag(tag)
    except run_notes.AnnotationError as exc:
        _fail("tag", str(exc))
    who = None if remove else _by(by)
    with analysis_store() as conn:
        run_id = resolve_or_fail(conn, run_ref)
        if remove:
            done = run_notes.remove_tag(conn, run_id, tag)
            click.echo(f"run {run_id}: tag {tag} {'removed' if done else 'was not set'}")
            return
        done = run_notes.add_tag(conn, run_id, tag, who)
    click.echo(f"run {run_id}: tagged {tag}" if done else f"run {run_id}: already tagged {tag}")


@click.command("note")
@click.argument("run_ref", metavar="RUN")
@click.argument("text")
@click.option("--by", "by", metavar="NAME", help=BY_HELP)
def note_command(run_ref: str, text: str, by: str | None) -> None:
    """Add a note (free text) to RUN. Anything shaped like a credential is masked."""
    who = _by(by)
    with analysis_store() as conn:
        run_id = resolve_or_fail(conn, run_ref)
        try:
            note_id = run_notes.add_note(conn, run_id, text, who)
        except run_notes.AnnotationError as exc:
            _fail("note", str(exc))
    click.echo(f"run {run_id}: note {note_id} added")


def _by(given: str | None) -> str | None:
    try:
        return owner_option(given)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--by") from None
