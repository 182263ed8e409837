"""Why peakload itself ended a request (the `error_phase` of a `cancelled` or `not_sent` record),
shared by the runner that writes these reasons and the analysis that judges them: a request the
instrument stopped is reported apart and never counts against the server.
"""

from __future__ import annotations

from typing import Final

ABORTED: Final = "aborted"  # the user stopped the run
TIMED_OUT: Final = "timed_out"  # the worker's time limit ended the shard
RUN_ENDED: Final = "run_ended"  # scheduled, but the run had ended (or its budget was spent)
LEVEL_ENDED: Final = "level_ended"  # `between_levels = "cancel"`, or a drain past the deadline
CONCURRENCY_CAP: Final = "concurrency_cap"  # open loop: `load.max_concurrency` in flight

# Stopped by the instrument, not demanded of the server: never a miss. A request cut at its
# level's end (LEVEL_ENDED) or refused by the cap (CONCURRENCY_CAP) was demanded and not served.
STOPPED_BY_PEAKLOAD: Final = frozenset({ABORTED, TIMED_OUT, RUN_ENDED})
