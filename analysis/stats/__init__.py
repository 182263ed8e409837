"""Statistics over loaded runs, from analysis.metrics' definitions: exact percentile spectra and
their bands (rank maths in ranks.py), grouped ITL spectra, frontiers, per-region splits, the
server's own series, cost."""
