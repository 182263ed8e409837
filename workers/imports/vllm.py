"""`vllm bench serve --save-result --save-detailed` JSON (vllm/benchmarks/serve.py): one level,
per request `start_times` (time.perf_counter s), `ttfts`, `itls` (s between chunks), `latencies`
(s from the send), `input_lens`, `output_lens`, `errors`, and `queue_times` (the wait for the
`--max-concurrency` semaphore after the request's arrival) where the version writes them."""

from __future__ import annotations

import math
import time
from datetime import datetime
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

TOOL = "vllm"
PER_REQUEST = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")
CONFIG_KEYS = (
    "date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
    "ramp_up_end_rps", "duration", "completed", "failed",
)  # fmt: skip
VERSION_KEYS = ("vllm_version", "version")


def _rate(value: Any, path: str) -> float:
    if value in (None, "inf", "Infinity") or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    v = number(value, path, "request_rate")
    assert v is not None
    return v


def _wall_origin(doc: dict[str, Any], end_s: float) -> tuple[int, str]:
    """The wall time of the perf_counter zero: the file's `date` (written when the run ended,
    local time, to the second) less the last request's end; else now."""
    date = doc.get("date")
    if isinstance(date, str):
        try:
            # vLLM writes datetime.now(): the local time of the machine that ran it, taken
            # here as this machine's zone
            when = datetime.strptime(date, "%Y%m%d-%H%M%S").astimezone().timestamp()
            return int((when - end_s) * 1e9), "wall times anchored to the file's date (to 1 s)"
        except ValueError:
            pass
    return int(
        (time.time() - end_s) * 1e9
    ), "wall times: no date in the file, anchored at the import"


def parse(path: Path, version: str | None = None) -> ToolRun:
    src = str(path)
    doc = as_dict(read_json(path), path, "top level")
    if "ttfts" not in doc or "start_times" not in doc:
        absent = "ttfts" if "ttfts" not in doc else "start_times"
        raise ImportFileError(
            src, absent, "missing: run `vllm bench serve` with --save-result --save-detailed"
        )
    cols = {k: as_list(need(doc, k, src), path, k) for k in (*PER_REQUEST, "start_times")}
    n = len(cols["ttfts"])
    for k, v in cols.items():
        if len(v) != n:
            raise ImportFileError(src, k, f"{len(v)} entries where ttfts has {n}")
    queue = doc.get("queue_times")
    queue_l = as_list(queue, path, "queue_times") if queue is not None else None
    if queue_l is not None and len(queue_l) != n:
        raise ImportFileError(src, "queue_times", f"{len(queue_l)} entries where ttfts has {n}")
    rate = _rate(doc.get("request_rate"), src)
    conc = count(doc.get("max_concurrency"), src, "max_concurrency")
    open_loop = math.isfinite(rate)
    reqs: list[ToolRequest] = []
    for i in range(n):
        f = f"[{i}]"
        err = cols["errors"][i]
        start = number(cols["start_times"][i], src, f"start_times{f}")
        assert start is not None
        itl_raw = as_list(cols["itls"][i], path, f"itls{f}")
        itls = [number(g, src, f"itls{f}") for g in itl_raw]
        q = number(queue_l[i], src, f"queue_times{f}", allow_none=True) if queue_l else None
        ttft = number(cols["ttfts"][i], src, f"ttfts{f}", allow_none=True)
        e2e = number(cols["latencies"][i], src, f"latencies{f}", allow_none=True)
        if err:  # vLLM leaves a failed request's ttft and latency at 0.0: not measured
            ttft = e2e = None
        reqs.append(
            ToolRequest(
                start_s=start,
                scheduled_s=start - q if (open_loop and q is not None) else None,
                ttft_s=ttft,
                e2e_s=e2e,
                itls_s=[g for g in itls if g is not None],
                prompt_tokens=count(cols["input_lens"][i], src, f"input_lens{f}"),
                output_tokens=count(cols["output_lens"][i], src, f"output_lens{f}"),
                error=str(err) if err else None,
            )
        )
    if open_loop:
        level = ToolLevel("rate", rate, reqs)
    else:
        level = ToolLevel("concurrency", float(conc if conc is not None else max(n, 1)), reqs)
    ends = [r.start_s + (r.e2e_s or 0.0) for r in reqs]
    origin, anchor = _wall_origin(doc, max(ends, default=0.0))
    tool_version = version or next((str(doc[k]) for k in VERSION_KEYS if doc.get(k)), None)
    backend = str(doc.get("endpoint_type") or doc.get("backend") or "")
    missing = [
        "per-chunk token counts: one token per chunk, the rest of output_lens on the first chunk",
        "response headers time, first answer token (reasoning) apart from the first token",
    ]
    if tool_version is None:
        missing.append("the tool's version: not in the file (give --tool-version)")
    if not doc.get("base_url"):
        missing.append(URL_NOTE)
    burst = doc.get("burstiness")
    return ToolRun(
        tool=TOOL,
        tool_version=tool_version,
        source=src,
        model=str(doc.get("model_id") or "unknown"),
        base_url=str(doc.get("base_url") or UNRECORDED_URL),
        api="openai-chat" if "chat" in backend else "openai-completions",
        levels=[level],
        wall_origin_ns=origin,
        config={k: doc[k] for k in CONFIG_KEYS if k in doc},
        imported=[
            f"{n} requests: TTFT, per-chunk gaps (itls) as chunk arrivals, end-to-end latency, "
            "prompt and output lengths, errors",
            "TTFT, ITL and end as vLLM measures them: its first chunk with choices (a role-only "
            "chunk counts), every gap between such chunks, the last of them (not [DONE])",
            "output lengths: the server's usage where it sent one, else vLLM's tokenizer count",
            "scheduled times from queue_times (arrival = send - client queue wait)"
            if open_loop and queue_l is not None
            else "send times (start_times)",
            anchor,
        ],
        missing=missing,
        arrival=("poisson" if burst in (None, 1, 1.0) else "gamma") if open_loop else None,
    )
