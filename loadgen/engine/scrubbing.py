"""The sink that scrubs what a server sent back before it is stored (loadgen.scrub): an error
body or a proxy's message may echo the request's headers or URL.
"""

from __future__ import annotations

from loadgen.engine.plan import Sink
from loadgen.results.records import Batch
from loadgen.scrub import remember, scrub


class ScrubbingSink:
    """A sink that scrubs every record's server text (error detail, response text) through the
    process's one scrubber, which it tells the run's secret values."""

    def __init__(self, sink: Sink, secrets: list[str]) -> None:
        self.sink = sink
        remember(secrets)

    def write(self, batch: Batch) -> None:
        for rec in batch.records:
            if rec.error_detail:
                rec.error_detail = scrub(rec.error_detail)
            if rec.response_text:
                rec.response_text = scrub(rec.response_text)
        self.sink.write(batch)

    def close(self) -> None:
        self.sink.close()
