"""`python -m loadgen.sim ...` is `peakload sim ...`."""

from loadgen.sim.cli import main

main()
