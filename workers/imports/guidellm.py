"""GuideLLM's `benchmarks.json` (`guidellm run --output kind=json`, report version 2): one level per
benchmark (its strategy: synchronous, concurrent, throughput, constant, poisson, async), each with
its `requests` (successful, errored, incomplete): per request `info.timings` (wall s:
`targeted_start` when the strategy meant to send it, `request_start`, `first_token_iteration`,
`last_token_iteration`, `request_end`), token counts and its error. GuideLLM keeps no time per
token, so no chunk arrivals are imported."""

from __future__ import annotations

import math
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
)
from workers.imports.reading import as_dict, as_list, read_json

TOOL = "guidellm"
CONCURRENT = {"synchronous", "concurrent", "throughput"}
RATED = {"constant", "poisson", "async"}
STATUS_LISTS = ("successful", "errored", "incomplete")


def _level(bench: dict[str, Any], src: str, where: str) -> tuple[str, float, str]:
    cfg = as_dict(need(bench, "config", src, f"{where}."), Path(src), f"{where}.config")
    strat = as_dict(need(cfg, "strategy", src, f"{where}.config."), Path(src), f"{where}.strategy")
    kind = str(strat.get("type_") or "")
    if kind == "synchronous":
        return "concurrency", 1.0, kind
    if kind in ("concurrent", "throughput"):
        streams = strat.get("streams") or strat.get("max_concurrency")
        v = number(streams, src, f"{where}.config.strategy.streams")
        assert v is not None
        return "concurrency", v, kind
    if kind in RATED:
        v = number(strat.get("rate"), src, f"{where}.config.strategy.rate")
        assert v is not None
        return "rate", v, kind
    raise ImportFileError(src, f"{where}.config.strategy.type_", f"unknown strategy {kind!r}")


def _t(timings: dict[str, Any], key: str, src: str, where: str) -> float | None:
    return number(timings.get(key), src, f"{where}.info.timings.{key}", allow_none=True)


def _request(raw: Any, status: str, src: str, where: str, origin: float) -> ToolRequest:
    r = as_dict(raw, Path(src), where)
    info = as_dict(need(r, "info", src, f"{where}."), Path(src), f"{where}.info")
    tm = as_dict(need(info, "timings", src, f"{where}.info."), Path(src), f"{where}.info.timings")
    start = _t(tm, "request_start", src, where)
    if start is None:
        start = _t(tm, "resolve_start", src, where)
    if start is None:
        raise ImportFileError(src, f"{where}.info.timings.request_start", "missing")
    first = _t(tm, "first_token_iteration", src, where)
    end = _t(tm, "request_end", src, where)
    target = _t(tm, "targeted_start", src, where)
    err = info.get("error") or r.get("error")
    return ToolRequest(
        start_s=start - origin,
        scheduled_s=None if target is None else min(target, start) - origin,
        ttft_s=None if first is None else first - start,
        e2e_s=None if end is None else end - start,
        itls_s=None,
        prompt_tokens=count(r.get("prompt_tokens"), src, f"{where}.prompt_tokens"),
        output_tokens=count(r.get("output_tokens"), src, f"{where}.output_tokens"),
        error=str(err) if err else ("errored" if status == "errored" else None),
        from_usage=r.get("response_metrics") is not None,
        cancelled=status == "incomplete",
    )


def parse(path: Path, version: str | None = None) -> ToolRun:
    src = str(path)
    doc = as_dict(read_json(path), path, "top level")
    benches = as_list(need(doc, "benchmarks", src), path, "benchmarks")
    if not benches:
        raise ImportFileError(src, "benchmarks", "empty: no benchmark to import")
    starts: list[float] = []
    for bi, b in enumerate(benches):
        reqs = as_dict(
            need(as_dict(b, path, f"benchmarks[{bi}]"), "requests", src), path, "requests"
        )
        for st in STATUS_LISTS:
            for r in reqs.get(st) or []:
                tm = ((r or {}).get("info") or {}).get("timings") or {}
                t = tm.get("targeted_start") or tm.get("request_start")
                if isinstance(t, int | float) and math.isfinite(t):
                    starts.append(float(t))
    origin = math.floor(min(starts, default=0.0))
    levels: list[ToolLevel] = []
    strategies: list[dict[str, Any]] = []
    n_incomplete = 0
    for bi, b in enumerate(benches):
        where = f"benchmarks[{bi}]"
        kind, value, strategy = _level(b, src, where)
        lv = ToolLevel(kind, value)
        reqs = as_dict(b["requests"], path, f"{where}.requests")
        for st in STATUS_LISTS:
            items = as_list(reqs.get(st) or [], path, f"{where}.requests.{st}")
            n_incomplete += len(items) if st == "incomplete" else 0
            for ri, r in enumerate(items):
                lv.requests.append(_request(r, st, src, f"{where}.requests.{st}[{ri}]", origin))
        lv.requests.sort(key=lambda q: q.scheduled_s if q.scheduled_s is not None else q.start_s)
        levels.append(lv)
        cfg = b.get("config") or {}
        strategies.append({"strategy": strategy, **(cfg.get("strategy") or {})})
    first_cfg = as_dict(benches[0].get("config") or {}, path, "benchmarks[0].config")
    backend = {k: v for k, v in (first_cfg.get("backend") or {}).items() if k != "api_key"}
    meta = doc.get("metadata") or {}
    tool_version = version or (
        str(meta["guidellm_version"]) if meta.get("guidellm_version") else None
    )
    target = str(backend.get("target") or "").rstrip("/")
    if target and not target.endswith("/v1"):
        target += "/v1"
    fmt = str(backend.get("request_format") or "")
    data = ((doc.get("config") or {}).get("spec") or {}).get("data") or []
    synth = next((d for d in data if isinstance(d, dict) and d.get("kind") == "synthetic_text"), {})
    rated = [s["strategy"] for s in strategies if s["strategy"] in RATED]
    n = sum(len(lv.requests) for lv in levels)
    return ToolRun(
        tool=TOOL,
        tool_version=tool_version,
        source=src,
        model=str(backend.get("model") or "unknown"),
        base_url=target or UNRECORDED_URL,
        api="openai-completions"
        if fmt.endswith("/completions") and "chat" not in fmt
        else "openai-chat",
        levels=levels,
        wall_origin_ns=int(origin * 1e9),
        config={"strategies": strategies, "backend": backend, "data": data},
        imported=[
            f"{n} requests over {len(levels)} benchmarks (successful, errored and incomplete): "
            "TTFT, end-to-end latency, prompt and output token counts, errors",
            "scheduled times from info.timings.targeted_start (when GuideLLM's strategy meant to "
            "send each request)",
            "wall times from GuideLLM's own stamps",
            *([f"{n_incomplete} incomplete requests as cancelled"] if n_incomplete else []),
        ],
        missing=[
            "per-token arrival times: GuideLLM keeps only the first and last token's, so ITL is "
            "absent and TPOT is (request end - first token) / (output tokens - 1) (GuideLLM's "
            "inter_token_latency ends at the last token)",
            "response headers time, first answer token (reasoning) apart from the first token",
        ],
        prompt_tokens=count(synth.get("prompt_tokens"), src, "config.spec.data.prompt_tokens"),
        output_tokens=count(synth.get("output_tokens"), src, "config.spec.data.output_tokens"),
        arrival=("constant" if rated[0] == "constant" else "poisson") if rated else None,
    )
