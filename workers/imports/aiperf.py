"""AIPerf's artifacts folder (`aiperf profile`, export level records): `profile_export.jsonl`, one
record per request (metadata: `credit_issued_ns` when the request was due, `request_start_ns`
the send, wall ns; metrics: `time_to_first_token`, `inter_chunk_latency` (ms between content
chunks), `request_latency`, sequence lengths; `error`), and the summary
`profile_export_aiperf.json` (its version, configuration and the phase's load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.imports.mapping import (
    ImportFileError,
    ToolLevel,
    ToolRequest,
    ToolRun,
    count,
    need,
    number,
    redact_command,
)
from workers.imports.reading import as_dict, as_list, read_json, read_jsonl

TOOL = "aiperf"
PROFILING = "profiling"


def _files(path: Path) -> tuple[Path, Path]:
    """The records file and the summary beside it."""
    folder = path if path.is_dir() else path.parent
    if path.is_dir():
        found = sorted(p for p in folder.glob("profile_export*.jsonl") if "_raw" not in p.name)
        if not found:
            raise ImportFileError(
                str(path),
                "profile_export*.jsonl",
                "missing: run AIPerf with --export-level records",
            )
        records = found[0]
    else:
        records = path
    summaries = sorted(folder.glob("profile_export*aiperf*.json")) or sorted(
        p for p in folder.glob("profile_export*.json") if p.suffix == ".json"
    )
    if not summaries:
        raise ImportFileError(
            str(folder), "profile_export_aiperf.json", "missing: the summary json"
        )
    return records, summaries[0]


def _metric(metrics: dict[str, Any], name: str, src: str, where: str) -> Any:
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise ImportFileError(src, f"{where}.metrics.{name}", "expected {value, unit}")
    unit = m.get("unit")
    if name in ("time_to_first_token", "request_latency", "inter_chunk_latency") and unit != "ms":
        raise ImportFileError(src, f"{where}.metrics.{name}.unit", f"expected ms, got {unit!r}")
    return m["value"]


def _request(rec: Any, src: str, i: int, origin_ns: int) -> ToolRequest:
    where = f"line {i + 1}"
    rec = as_dict(rec, Path(src), where)
    meta = as_dict(need(rec, "metadata", src, f"{where}."), Path(src), f"{where}.metadata")
    metrics = rec.get("metrics") or {}
    start = number(
        need(meta, "request_start_ns", src, f"{where}.metadata."), src, f"{where}.request_start_ns"
    )
    credit = number(meta.get("credit_issued_ns"), src, f"{where}.credit_issued_ns", allow_none=True)
    assert start is not None
    ttft = number(
        _metric(metrics, "time_to_first_token", src, where), src, f"{where}.ttft", allow_none=True
    )
    e2e = number(
        _metric(metrics, "request_latency", src, where),
        src,
        f"{where}.request_latency",
        allow_none=True,
    )
    icl = _metric(metrics, "inter_chunk_latency", src, where)
    gaps = None
    if icl is not None:
        gaps = [
            g / 1e3
            for g in (
                number(x, src, f"{where}.inter_chunk_latency")
                for x in as_list(icl, Path(src), f"{where}.inter_chunk_latency")
            )
            if g is not None
        ]
    elif ttft is not None and _metric(metrics, "output_sequence_length", src, where) == 1:
        gaps = []
    err = rec.get("error")
    err_text = None
    status = None
    if err:
        err_d = as_dict(err, Path(src), f"{where}.error")
        err_text = str(err_d.get("message") or err_d.get("type") or "error")
        status = count(err_d.get("code"), src, f"{where}.error.code")
    end_ns = meta.get("request_end_ns")
    if e2e is None and isinstance(end_ns, int | float):
        e2e = (end_ns - start) / 1e6
    osl = _metric(metrics, "output_sequence_length", src, where)
    if osl is None:
        osl = _metric(metrics, "output_token_count", src, where)
    isl = _metric(metrics, "input_sequence_length", src, where)
    return ToolRequest(
        start_s=(start - origin_ns) / 1e9,
        scheduled_s=None if credit is None else (credit - origin_ns) / 1e9,
        ttft_s=None if ttft is None else ttft / 1e3,
        e2e_s=None if e2e is None else e2e / 1e3,
        itls_s=gaps,
        prompt_tokens=count(isl, src, f"{where}.input_sequence_length"),
        output_tokens=count(osl, src, f"{where}.output_sequence_length"),
        error=err_text,
        http_status=status if status and 100 <= status < 600 else None,
        cancelled=bool(meta.get("was_cancelled")),
    )


def _level(summary: dict[str, Any], src: str) -> tuple[str, float, dict[str, Any]]:
    cfg = as_dict(summary.get("input_config") or {}, Path(src), "input_config")
    phases = [p for p in cfg.get("phases") or [] if isinstance(p, dict)]
    phase = next((p for p in phases if p.get("kind", p.get("name")) == PROFILING), None)
    if phase is None:
        raise ImportFileError(src, "input_config.phases", "no profiling phase: the load is unknown")
    if phase.get("type") == "concurrency" or (phase.get("concurrency") and not phase.get("rate")):
        c = number(
            need(phase, "concurrency", src, "input_config.phases[profiling]."), src, "concurrency"
        )
        assert c is not None
        return "concurrency", c, phase
    rate = phase.get("rate", phase.get("request_rate"))
    r = number(rate, src, "input_config.phases[profiling].rate")
    assert r is not None
    return "rate", r, phase


def _arrival(phase: dict[str, Any]) -> str | None:
    mode = str(phase.get("request_rate_mode") or phase.get("arrival_pattern") or "poisson").lower()
    return mode if mode in ("constant", "poisson", "gamma") else None


def _meta(rec: Any) -> dict[str, Any]:
    meta = rec.get("metadata") if isinstance(rec, dict) else None
    return meta if isinstance(meta, dict) else {}


def parse(path: Path, version: str | None = None) -> ToolRun:
    records_path, summary_path = _files(path)
    src = str(records_path)
    summary = as_dict(read_json(summary_path), summary_path, "top level")
    rows = read_jsonl(records_path)
    prof = [
        (i, r)
        for i, r in enumerate(rows)
        if _meta(r).get("benchmark_phase", PROFILING) == PROFILING
    ]
    warm = len(rows) - len(prof)
    starts = [_meta(r).get("credit_issued_ns") or _meta(r).get("request_start_ns") for _, r in prof]
    origin = int(min((s for s in starts if isinstance(s, int | float)), default=0))
    reqs = [_request(r, src, i, origin) for i, r in prof]
    kind, value, phase = _level(summary, str(summary_path))
    cfg = summary.get("input_config") or {}
    endpoint = cfg.get("endpoint") or {}
    urls = endpoint.get("urls") or []
    models = ((cfg.get("models") or {}).get("items") or [{}])[0].get("name", "unknown")
    prompts = next(
        (d.get("prompts") or {} for d in cfg.get("datasets") or [] if isinstance(d, dict)), {}
    )
    isl, osl = (prompts.get("isl") or {}).get("mean"), (prompts.get("osl") or {}).get("mean")
    etype = str(endpoint.get("type") or "chat")
    base = str(urls[0]).rstrip("/") if urls else None
    if base and not base.endswith("/v1"):
        base += "/v1"
    missing = [
        "per-chunk token counts: one token per content chunk, the rest of the output length on "
        "the first chunk",
        "response headers time, first answer token (reasoning) apart from the first token",
    ]
    imported = [
        f"{len(reqs)} requests of the profiling phase: TTFT, inter-chunk gaps as chunk arrivals, "
        "request latency, input and output lengths, errors",
        "scheduled times from credit_issued_ns (when AIPerf issued the request's credit)",
        "wall times from the records' own ns stamps",
    ]
    if warm:
        imported.append(f"{warm} warm-up records left out")
    return ToolRun(
        tool=TOOL,
        tool_version=version or (str(found) if (found := summary.get("aiperf_version")) else None),
        source=str(path),
        model=str(models),
        base_url=base or "http://unrecorded.invalid",
        api="openai-chat" if etype == "chat" else "openai-completions",
        levels=[ToolLevel(kind, value, reqs)],
        wall_origin_ns=origin,
        config={"phase": phase, "endpoint": endpoint, "datasets": cfg.get("datasets"),
                "cli_command": redact_command((summary.get("run_info") or {}).get("cli_command"))},
        imported=imported,
        missing=missing,
        prompt_tokens=int(isl) if isinstance(isl, int | float) and isl >= 1 else None,
        output_tokens=int(osl) if isinstance(osl, int | float) and osl >= 1 else None,
        arrival=_arrival(phase) if kind == "rate" else None,
    )  # fmt: skip
