"""`peakload sim`: the simulated inference engine (the command lives with the engine in
loadgen/sim/cli.py so that `python -m loadgen.sim` behaves identically)."""

from __future__ import annotations

from loadgen.sim.cli import sim

__all__ = ["sim"]
