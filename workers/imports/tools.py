"""`peakload import TOOL PATH`'s entry: which module reads which tool's output, and the one call
that parses, maps and stores a run (workers/imports/store.py, one transaction)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workers.imports import aiperf, genai_bench, guidellm, inference_perf, vllm
from workers.imports.mapping import URL_NOTE, ImportFileError, ToolRun, map_run
from workers.imports.store import new_run_id, store_import
from workers.store.connect import connect_store

Parser = Callable[[Path, str | None], ToolRun]
TOOLS: dict[str, tuple[Parser, str]] = {
    "vllm": (vllm.parse, "`vllm bench serve --save-result --save-detailed` JSON"),
    "guidellm": (guidellm.parse, "GuideLLM benchmarks.json"),
    "aiperf": (aiperf.parse, "AIPerf artifacts folder (profile_export*.jsonl + summary json)"),
    "inference-perf": (
        inference_perf.parse,
        "inference-perf report folder (per-request lifecycle)",
    ),
    "genai-bench": (genai_bench.parse, "genai-bench experiment folder (per-request data)"),
}


def parse_tool(tool: str, path: Path, version: str | None = None) -> ToolRun:
    if tool not in TOOLS:
        raise ImportFileError(str(path), "", f"unknown tool {tool!r} (one of {', '.join(TOOLS)})")
    if not path.exists():
        raise ImportFileError(str(path), "", "no such file or folder")
    return TOOLS[tool][0](path, version)


def import_run(
    tool: str,
    path: Path,
    *,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    base_url: str | None = None,
    version: str | None = None,
    url: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Read `path` as `tool`'s output and store it as a completed run in the store at `url`
    (default: the configured one). Returns the run id and the import's notes (tool, version,
    requests, imported, missing: workers.imports.mapping.notes). Raises
    ImportFileError (a SpecError) for a bad file, StoreError for the store; nothing is written
    then."""
    run = parse_tool(tool, path, version)
    if base_url:
        run.base_url = base_url
        run.missing = [m for m in run.missing if m != URL_NOTE]
    if not any(lv.requests for lv in run.levels):
        raise ImportFileError(str(path), "", "no per-request data in the file: nothing to import")
    run_id = new_run_id()
    mapped = map_run(run, run_id, name or f"{tool}-{path.stem}", labels or {})
    with connect_store(url) as conn:
        store_import(conn, mapped, run_id)
    return run_id, mapped.notes
