"""What a distributed run looks like from the coordinator while it runs: live per-region
progress (from the ticks) as a rich table. (The per-region network split of TTFT afterwards is
analysis.stats.regions.network_breakdown's.)
"""

from __future__ import annotations

from typing import Any

from rich.table import Table


def progress_table(run_id: str, regions: list[dict[str, Any]]) -> Table:
    """One row per region: shards by state, requests done, errors, in flight, tokens."""
    t = Table(title=f"run {run_id}", expand=False)
    for col in ("region", "shards", "done", "errors", "in flight", "output tokens"):
        t.add_column(col, justify="left" if col in ("region", "shards") else "right")
    for r in regions:
        states: dict[str, int] = {}
        for st in r["states"].values():
            states[st] = states.get(st, 0) + 1
        t.add_row(
            r["region"],
            " ".join(f"{n} {st}" for st, n in sorted(states.items())),
            str(r["completed"]),
            str(r["errors"]),
            str(r["in_flight"]),
            str(r["output_tokens"]),
        )
    return t
