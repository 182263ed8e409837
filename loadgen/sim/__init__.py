"""A simulated OpenAI-compatible inference engine (continuous batching or an exact fixed
schedule, seeded faults, a ground-truth log of every write). See config.py for the model,
server.py for `serve`/`run`, truth.py for the log format, cli.py for `peakload sim`.
"""
