"""loadgen.targets loads its public names on first use: each resolves to its home module's
object, and a leaf import (the simulator's `loadgen.targets.audio`) does not load httpx."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import loadgen.targets as targets


def test_every_public_name_resolves_to_its_home_module() -> None:
    assert sorted(targets.__all__) == sorted(targets._HOME)
    for name in targets.__all__:
        value = getattr(targets, name)
        assert value.__module__ == f"loadgen.targets.{targets._HOME[name]}"


def test_no_public_name_is_also_a_submodule() -> None:
    """The import system binds a submodule over a lazy name of the same name once anything
    imports it (`preflight` did: "'module' object is not callable" in `submit`)."""
    submodules = {m.name for m in pkgutil.iter_modules(targets.__path__)}
    assert not submodules & set(targets.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        targets.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_the_simulator_imports_without_the_clients() -> None:
    probe = "import sys, loadgen.sim.server; print('httpx' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stdout + out.stderr
