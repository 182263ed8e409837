"""LoRA adapters for the real engine's tests, made offline: random low-rank weights for the base
model's attention projections, written as a GGUF LoRA adapter (the layout llama.cpp's
convert_lora_to_gguf.py writes and llama.cpp's adapter loader checks: general.type = adapter,
general.architecture = the base model's, adapter.type = lora, adapter.lora.alpha; per target
tensor `<name>.lora_a` of ggml shape [n_in, rank] and `<name>.lora_b` of [rank, n_out]).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TARGETS = ("attn_q.weight", "attn_v.weight")
RANK = 8


def base_tensors(model: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The base model's architecture and the ggml shape (ne0 = inputs, ne1 = outputs) of each
    tensor an adapter targets, read with gguf.GGUFReader."""
    import gguf

    reader = gguf.GGUFReader(str(model))
    field = reader.fields["general.architecture"]
    arch = bytes(field.parts[field.data[0]]).decode()
    shapes = {
        t.name: (int(t.shape[0]), int(t.shape[1]))
        for t in reader.tensors
        if t.name.startswith("blk.") and t.name.split(".", 2)[2] in TARGETS
    }
    if not shapes:
        raise RuntimeError(f"{model}: no {TARGETS} tensors to adapt")
    return arch, shapes


def write_lora(model: Path, out: Path, *, seed: int, scale: float = 0.02, rank: int = RANK) -> Path:
    """A random LoRA adapter for `model` at `out`: A and B drawn N(0, scale²), alpha = rank."""
    import gguf

    arch, shapes = base_tensors(model)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    for name, (n_in, n_out) in sorted(shapes.items()):
        # numpy shapes are ggml's reversed: a [n_in, rank] tensor is a (rank, n_in) array
        a = rng.normal(0.0, scale, size=(rank, n_in)).astype(np.float32)
        b = rng.normal(0.0, scale, size=(n_out, rank)).astype(np.float32)
        writer.add_tensor(name + ".lora_a", a)
        writer.add_tensor(name + ".lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
