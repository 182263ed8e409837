"""A shard plan: the slice of a run one worker slot executes, as plain JSON-safe data, and the
`Sink` a runner writes its records to. Plans are made by the planner (workers/planner.py) and
executed by `loadgen.engine.runner.run_shard`, in-process or inside a Celery task: one path, two
executors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from loadgen.results.records import Batch
from loadgen.runspec.spec import RunSpec, spec_from_dict


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """What one worker slot runs.

    `fraction` is this shard's share of the run's load: open-loop rates and closed-loop user
    counts of every level are multiplied by it (users rounded so the shards of a level add up to
    the configured count: see `users_per_level`). `seed` is distinct per shard.
    """

    run_id: str
    shard_id: str
    region: str
    slot: int
    fraction: float
    seed: int
    users_per_level: list[int]  # closed loop: this shard's users at each level (may be 0)
    max_requests: int  # this shard's share of load.max_requests
    spec: dict[str, Any]  # RunSpec.public_dict()
    extra: dict[str, Any] = field(default_factory=dict)

    def run_spec(self) -> RunSpec:
        return spec_from_dict(self.spec, where=f"shard {self.shard_id}")

    def in_flight_cap(self) -> int:
        """This shard's share of `load.max_concurrency` (the planner's split; the whole cap for
        a plan made before the split existed)."""
        cap = self.extra.get("max_concurrency")
        return int(cap) if cap else int(self.spec["load"]["max_concurrency"])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardPlan:
        return cls(**data)


class Sink(Protocol):
    """Where a runner's records go. `write` must not block the event loop for long: a store
    sink hands the batch to a writer thread. `close` flushes everything and reports failures."""

    def write(self, batch: Batch) -> None: ...

    def close(self) -> None: ...
