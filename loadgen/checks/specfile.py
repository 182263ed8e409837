"""A run spec read from its TOML file, with every file it names read through before any work
(the dataset and the trace: each line decoded and checked), so a bad file is refused before
the probe or the first request. Above the engine, whose readers it uses.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from loadgen.engine.traces import trace_entries
from loadgen.engine.workload import load_dataset
from loadgen.errors import SpecError
from loadgen.runspec.spec import RunSpec, spec_from_dict


def load_spec(path: str | Path) -> RunSpec:
    """Read and validate a TOML run spec; raise `SpecError` naming the file and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {exc}", where=str(p)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=str(p)) from None
    spec = spec_from_dict(data, where=str(p))
    base = p.parent
    return resolve_paths(spec, base)


def resolve_paths(spec: RunSpec, base: Path) -> RunSpec:
    """Make dataset and trace paths relative to the spec's folder, and read them through (each
    line decoded and checked: loadgen.runspec.jsonl), so a bad file is refused before any
    request."""
    updates_w: dict[str, Any] = {}
    updates_l: dict[str, Any] = {}
    if spec.workload.dataset:
        p = (base / spec.workload.dataset).resolve()
        if not p.exists():
            raise SpecError(f"dataset file not found: {p}", where="workload.dataset")
        load_dataset(str(p))
        updates_w["dataset"] = str(p)
    if spec.load.trace:
        p = (base / spec.load.trace).resolve()
        if not p.exists():
            raise SpecError(f"trace file not found: {p}", where="load.trace")
        trace_entries(spec.load.model_copy(update={"trace": str(p)}))
        updates_l["trace"] = str(p)
    if not updates_w and not updates_l:
        return spec
    return spec.model_copy(
        update={
            "workload": spec.workload.model_copy(update=updates_w),
            "load": spec.load.model_copy(update=updates_l),
        }
    )
