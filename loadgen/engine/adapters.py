"""Which LoRA adapter each request asks for, and how the request names it: a seeded weighted
draw from `[[workload.adapters]]` per request, or per run of `switch_every` consecutive requests
of a shard (so adapter switches are few and countable); the same (seed, index) always draws the
same adapter, so a replayed shard asks the same adapters."""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.runspec.adapter_spec import AdapterSpec
from loadgen.runspec.workload_spec import WorkloadSpec

_ADAPTER_STREAM = 0xADA  # a seed word of its own: the prompt's draws stay as they were


class AdapterPicker:
    """Draws one shard's adapters: `pick(index)` is the adapter of request `index` (None when
    the workload names none)."""

    def __init__(self, workload: WorkloadSpec, shard_seed: int) -> None:
        self._adapters = list(workload.adapters)
        self._every = workload.switch_every
        self._seed = shard_seed
        weights = np.array([a.weight for a in self._adapters], dtype=np.float64)
        self._cum = np.cumsum(weights / weights.sum()) if self._adapters else weights

    def pick(self, index: int) -> AdapterSpec | None:
        if not self._adapters:
            return None
        unit = index // self._every if self._every else index
        u = float(np.random.default_rng([self._seed, unit, _ADAPTER_STREAM]).random())
        k = int(np.searchsorted(self._cum, u, side="right"))
        return self._adapters[min(k, len(self._adapters) - 1)]


def name_adapter(body: dict[str, Any], workload: WorkloadSpec, adapter: AdapterSpec) -> None:
    """Put the adapter in a request body as `workload.adapter_field` says: the `model` (vLLM),
    or llama.cpp server's per-request `lora` list. An adapter without `lora_id` is the base
    model: every `lora_id` the workload names at scale 0 (llama.cpp reads an empty list as "the
    server's defaults" and then keeps a slot's cache whatever adapter filled it; a list of
    zeros is a real change of adapter), `[]` when the workload names none."""
    if workload.adapter_field == "model":
        body["model"] = adapter.name
    elif adapter.lora_id is not None:
        body["lora"] = [{"id": adapter.lora_id, "scale": adapter.scale}]
    else:
        ids = sorted({a.lora_id for a in workload.adapters if a.lora_id is not None})
        body["lora"] = [{"id": i, "scale": 0.0} for i in ids]
