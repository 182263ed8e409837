"""inference-perf's `per_request_lifecycle_metrics.json` (report `request_lifecycle.per_request`;
inference_perf/reportgen/base.py): a list of requests, each with `start_time` and `end_time`
(seconds on the tool's clock), `info` (InferenceInfo: `input_tokens`, `response_metrics`
with `output_tokens`, `output_token_times` and `chunk_times`, or in older versions
`output_tokens` and `output_token_times` in `info` itself) and `error` ({error_type, error_msg}).
PATH is the file or the folder holding it. The file names no load and no stage, so every
request is one level at its observed rate."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from workers.imports.mapping import (
    UNRECORDED_URL,
    URL_NOTE,
    ImportFileError,
    ToolLevel,
    ToolRequest,
    ToolRun,
    count,
    need,
    number,
)
from workers.imports.reading import as_dict, as_list, read_json

TOOL = "inference-perf"
FILE = "per_request_lifecycle_metrics.json"
EPOCH_2001_S = 978_307_200.0  # stamps above this are wall-clock seconds (time.time())


def _times(info: dict[str, Any], src: str, where: str) -> list[float] | None:
    resp = info.get("response_metrics") or {}
    raw = resp.get("output_token_times") or info.get("output_token_times")
    if raw is None:
        raw = resp.get("chunk_times")
    if raw is None:
        return None
    out = []
    for i, t in enumerate(as_list(raw, Path(src), f"{where}.output_token_times")):
        v = number(t, src, f"{where}.output_token_times[{i}]")
        assert v is not None
        out.append(v)
    return out


def _request(raw: Any, src: str, i: int) -> tuple[ToolRequest, float]:
    where = f"[{i}]"
    r = as_dict(raw, Path(src), where)
    start = number(need(r, "start_time", src, f"{where}."), src, f"{where}.start_time")
    end = number(r.get("end_time"), src, f"{where}.end_time", allow_none=True)
    assert start is not None
    info = as_dict(r.get("info") or {}, Path(src), f"{where}.info")
    resp = info.get("response_metrics") or {}
    text = (info.get("request_metrics") or {}).get("text") or {}
    err = r.get("error")
    err_text = None
    if err:
        e = as_dict(err, Path(src), f"{where}.error")
        err_text = f"{e.get('error_type') or 'error'}: {e.get('error_msg') or ''}".strip()
    times = _times(info, src, where) if not err else None
    ttft = (times[0] - start) if times else None
    gaps = [b - a for a, b in itertools.pairwise(times)] if times else None
    usage = resp.get("server_usage") or {}
    out = resp.get("output_tokens", info.get("output_tokens"))
    sched = number(r.get("scheduled_time"), src, f"{where}.scheduled_time", allow_none=True)
    isl = info.get("input_tokens", text.get("input_tokens"))
    server_out = usage.get("completion_tokens")
    req = ToolRequest(
        start_s=start,
        scheduled_s=sched,
        ttft_s=ttft,
        e2e_s=None if end is None or err else end - start,
        itls_s=gaps,
        prompt_tokens=count(isl, src, f"{where}.info.input_tokens"),
        output_tokens=count(out, src, f"{where}.info.output_tokens"),
        error=err_text,
        from_usage=server_out is not None and out == server_out,
    )
    return req, (end if end is not None else start)


def parse(path: Path, version: str | None = None) -> ToolRun:
    file = path / FILE if path.is_dir() else path
    if not file.exists():
        raise ImportFileError(str(path), FILE, "missing: enable request_lifecycle.per_request")
    src = str(file)
    rows = as_list(read_json(file), file, "top level")
    parsed = [_request(r, src, i) for i, r in enumerate(rows)]
    reqs = [p[0] for p in parsed]
    if not reqs:
        raise ImportFileError(src, "top level", "empty: no request to import")
    first = min(r.scheduled_s if r.scheduled_s is not None else r.start_s for r in reqs)
    last = max(p[1] for p in parsed)
    if first > EPOCH_2001_S:
        origin_s, anchor = 0.0, "wall times from the file's own stamps (time.time())"
    else:  # a monotonic clock: the file's modification time is the run's end
        origin_s = file.stat().st_mtime - last
        anchor = "wall times anchored to the file's modification time (its stamps are monotonic)"
    for r in reqs:  # re-origin at the first request, keeping float precision
        r.start_s -= first
        if r.scheduled_s is not None:
            r.scheduled_s -= first
    span = max(last - first, 1e-3)
    rate = len(reqs) / span
    has_sched = any(r.scheduled_s is not None for r in reqs)
    return ToolRun(
        tool=TOOL,
        tool_version=version,
        source=src,
        model="unknown",
        base_url=UNRECORDED_URL,
        api="openai-chat",
        levels=[ToolLevel("rate", round(rate, 3), reqs)],
        wall_origin_ns=int((origin_s + first) * 1e9),
        config={"observed_rate_rps": rate, "span_s": span},
        imported=[
            f"{len(reqs)} requests: start and end, per-token arrival times (output_token_times) "
            "as chunk arrivals, input and output token counts, errors",
            anchor,
            *(["scheduled times from scheduled_time"] if has_sched else []),
        ],
        missing=[
            "the load: the per-request file names no stage or rate; one level at the observed "
            f"rate ({rate:.3g} req/s over {span:.3g} s)",
            "the model (give --name or a label) and the tool's version (give --tool-version)",
            URL_NOTE,
        ],
    )
