"""`python -m ui` is the `peakload` command (for environments without the console script)."""

from ui.cli import main

main()
