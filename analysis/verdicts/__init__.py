"""Verdicts and their exit codes (exitcodes.py): SLA claims, a run against its spec, compare,
nightly change points. The CLI and the UI only present them."""
