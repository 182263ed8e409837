"""Every command in the lazy table imports and answers --help (a typo there would only show
when a user typed that command)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ui.cli import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_loads_and_helps(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_top_level_help_lists_every_command_without_importing_them() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
