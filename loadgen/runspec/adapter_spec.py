"""`[[workload.adapters]]`: the LoRA adapters a multi-adapter workload spreads its requests over
(one base model, many adapters), each with a weight; how a request names its adapter
(`workload.adapter_field`) and whether adapters come in runs (`workload.switch_every`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loadgen.runspec.fields import Strict

AdapterField = Literal["model", "lora"]
"""How a request names its adapter: `model` sends the adapter's name as the request's `model`
(vLLM's `--enable-lora` convention: each adapter is served as a model); `lora` sends llama.cpp
server's per-request list, `"lora": [{"id": lora_id, "scale": scale}]` (an adapter without a
`lora_id` is the base model: every lora_id the workload names, at scale 0)."""

MAX_ADAPTERS = 1000


class AdapterSpec(Strict):
    """One adapter: its `name` (what records and reports call it; the `model` sent under
    `adapter_field = "model"`), its share of the requests (`weight`, relative to the others'),
    and for `adapter_field = "lora"` its index among the server's `--lora` files and scale."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    weight: float = Field(default=1.0, gt=0, le=1e9)
    lora_id: int | None = Field(default=None, ge=0, le=100_000)
    scale: float = Field(default=1.0, ge=-100, le=100)
