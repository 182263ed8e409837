"""genai-bench's experiment folder (`genai-bench benchmark`): `experiment_metadata.json` (version,
command, model, API base) and one JSON per scenario and load, whose `individual_request_metrics`
hold per request `ttft`, `tpot`, `e2e_latency`, token counts and `error_code` /
`error_message` (in `_time_unit`), beside `aggregated_metrics` (`num_concurrency`,
`run_duration`). genai-bench records no send time per request: each request is placed at its
scenario's start (the file's modification time less `run_duration`), which keeps latencies,
counts and the scenario's throughput (over `run_duration`) but gives no timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.imports.mapping import (
    UNRECORDED_URL,
    ImportFileError,
    ToolLevel,
    ToolRequest,
    ToolRun,
    count,
    need,
    number,
    redact_command,
)
from workers.imports.reading import as_dict, as_list, read_json

TOOL = "genai-bench"
METADATA = "experiment_metadata.json"
UNITS = {"s": 1.0, "ms": 1e-3}


def _scenario_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = [p for p in path.glob("*.json") if p.name != METADATA]
    return sorted(files, key=lambda p: p.stat().st_mtime)


def _request(raw: Any, src: str, where: str, scale: float, start: float) -> ToolRequest:
    r = as_dict(raw, Path(src), where)

    def sec(key: str) -> float | None:
        v = number(r.get(key), src, f"{where}.{key}", allow_none=True)
        return None if v is None else v * scale

    code = count(r.get("error_code"), src, f"{where}.error_code")
    failed = code is not None or bool(r.get("error_message"))
    return ToolRequest(
        start_s=start,
        ttft_s=None if failed else sec("ttft"),
        e2e_s=None if failed else sec("e2e_latency"),
        itls_s=None,
        prompt_tokens=count(r.get("num_input_tokens"), src, f"{where}.num_input_tokens"),
        output_tokens=count(r.get("num_output_tokens"), src, f"{where}.num_output_tokens"),
        error=(str(r.get("error_message") or f"HTTP {code}") if failed else None),
        http_status=code if code and 100 <= code < 600 else None,
    )


def parse(path: Path, version: str | None = None) -> ToolRun:
    folder = path if path.is_dir() else path.parent
    meta_path = folder / METADATA
    meta = as_dict(read_json(meta_path), meta_path, "top level") if meta_path.exists() else {}
    levels: list[ToolLevel] = []
    origin: float | None = None
    scenarios: list[dict[str, Any]] = []
    for f in _scenario_files(path):
        doc = read_json(f)
        if not isinstance(doc, dict) or "individual_request_metrics" not in doc:
            continue
        src = str(f)
        agg = as_dict(need(doc, "aggregated_metrics", src), f, "aggregated_metrics")
        unit = str(doc.get("_time_unit") or agg.get("_time_unit") or "s")
        if unit not in UNITS:
            raise ImportFileError(src, "_time_unit", f"unknown unit {unit!r} (s or ms)")
        raw_duration = need(agg, "run_duration", src, "aggregated_metrics.")
        duration = number(raw_duration, src, "aggregated_metrics.run_duration")
        assert duration is not None
        start_wall = f.stat().st_mtime - duration
        origin = start_wall if origin is None else min(origin, start_wall)
        kind = str(agg.get("iteration_type") or "num_concurrency")
        load_key = "batch_size" if kind == "batch_size" else "num_concurrency"
        value = number(need(agg, load_key, src, "aggregated_metrics."), src, load_key)
        assert value is not None
        items = as_list(doc["individual_request_metrics"], f, "individual_request_metrics")
        lv = ToolLevel("concurrency", value, span_s=duration)
        for i, r in enumerate(items):
            where = f"individual_request_metrics[{i}]"
            lv.requests.append(_request(r, src, where, UNITS[unit], start_wall))
        levels.append(lv)
        scenarios.append({"file": f.name, "scenario": agg.get("scenario"), load_key: value})
    if not levels:
        raise ImportFileError(str(path), "individual_request_metrics", "no scenario file has it")
    assert origin is not None
    for lv in levels:
        for r in lv.requests:
            r.start_s -= origin
    base = str(meta.get("api_base") or "").rstrip("/")
    if base and not base.endswith("/v1"):
        base += "/v1"
    n = sum(len(lv.requests) for lv in levels)
    tool_version = version or (str(v) if (v := meta.get("benchmark_version")) else None)
    return ToolRun(
        tool=TOOL,
        tool_version=tool_version,
        source=str(path),
        model=str(meta.get("api_model_name") or "unknown"),
        base_url=base or UNRECORDED_URL,
        api="openai-chat",
        levels=levels,
        wall_origin_ns=int(origin * 1e9),
        config={
            "scenarios": scenarios,
            "cmd": redact_command(meta.get("cmd")),
            "traffic_scenario": meta.get("traffic_scenario"),
            "server_engine": meta.get("server_engine"),
        },
        imported=[
            f"{n} requests over {len(levels)} scenario runs: TTFT, TPOT, end-to-end latency, "
            "input and output token counts, errors (error_code as the HTTP status)",
            "each scenario's span: run_duration, ending at its file's modification time",
        ],
        missing=[
            "send times: genai-bench records none per request; each is placed at its "
            "scenario's start, so latencies, counts and throughput over run_duration hold but "
            "the timeline does not",
            "per-token arrival times: ITL absent",
            "response headers time, first answer token (reasoning) apart from the first token",
        ],
    )
