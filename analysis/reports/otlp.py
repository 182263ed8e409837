"""A stored run's metrics as OTLP JSON (`peakload export RUN --format otlp`, `peakload run
--otlp-endpoint URL`): one ExportMetricsServiceRequest in the protobuf-JSON form of OTLP/HTTP,
on one line, as an OpenTelemetry Collector's `otlpjsonfile` receiver reads a file and its
`otlp` receiver takes a POST to /v1/metrics with `Content-Type: application/json`.

The instruments, their attributes and buckets are loadgen.results.genai's, counted from the
stored rows exactly as the live metrics count the records: requests by outcome as a cumulative
monotonic sum, TTFT, chunk gaps, duration and token usage as explicit-bucket histograms, all
from the run's start to its end (`startTimeUnixNano`, `timeUnixNano`). In flight, a live
quantity, is not exported. Integers that are 64-bit in the protobuf are decimal strings, as
the JSON mapping writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pandas as pd
import psycopg

from analysis.store.load import load_requests, load_run
from loadgen.results import genai

CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
PUSH_TIMEOUT_S = 10.0


@dataclass(slots=True)
class _Histogram:
    bounds: tuple[float, ...]
    values: npt.NDArray[np.float64]

    def point(self) -> dict[str, Any]:
        return {
            "count": str(self.values.size),
            "sum": float(self.values.sum()),
            "bucketCounts": [str(c) for c in genai.bucket_counts(self.bounds, self.values)],
            "explicitBounds": list(self.bounds),
            "min": float(self.values.min()),
            "max": float(self.values.max()),
        }


def _attributes(names: tuple[str, ...], values: tuple[str, ...]) -> list[dict[str, Any]]:
    """OTel attributes; an empty value (an ok request's error.type) is left out, as
    Prometheus reads an empty label."""
    return [
        {"key": k, "value": {"stringValue": v}} for k, v in zip(names, values, strict=True) if v
    ]


def _package_version() -> str:
    try:
        return version("peakload")
    except PackageNotFoundError:
        return "unknown"


def _unix_ns(t: Any) -> str:
    return str(int(pd.Timestamp(t).value)) if t is not None and not pd.isna(t) else "0"


def otlp_metrics(requests: pd.DataFrame, run: dict[str, Any]) -> dict[str, Any]:
    """The ExportMetricsServiceRequest of one run: `requests` as analysis.store.load_requests
    gives them, `run` as load_run."""
    obs = genai.observe(list(requests.itertuples(index=False)))
    counts = obs.requests
    hists: dict[genai.Instrument, dict[tuple[str, ...], _Histogram]] = {
        inst: {} for inst in genai.HISTOGRAMS
    }
    for (inst, labels), values in obs.arrays().items():
        hists[inst][labels] = _Histogram(inst.buckets, values)
    start, end = _unix_ns(run.get("started_at")), _unix_ns(run.get("ended_at"))
    times = {"startTimeUnixNano": start, "timeUnixNano": end}
    names = ("run_id", "region")
    metrics: list[dict[str, Any]] = [
        {
            "name": genai.REQUESTS.name,
            "unit": genai.REQUESTS.unit,
            "description": genai.REQUESTS.description,
            "sum": {
                "aggregationTemporality": CUMULATIVE,
                "isMonotonic": True,
                "dataPoints": [
                    {"attributes": _attributes((*names, "outcome"), k), **times, "asInt": str(n)}
                    for k, n in sorted(counts.items())
                ],
            },
        }
    ]
    for inst in genai.HISTOGRAMS:
        points = [
            {"attributes": _attributes((*names, *inst.labels), labels), **times, **h.point()}
            for labels, h in sorted(hists[inst].items())
        ]
        if points:
            metrics.append(
                {
                    "name": inst.name,
                    "unit": inst.unit,
                    "description": inst.description,
                    "histogram": {"aggregationTemporality": CUMULATIVE, "dataPoints": points},
                }
            )
    resource = [
        ("service.name", "peakload"),
        ("peakload.run.id", str(run["run_id"])),
        ("peakload.run.name", str(run.get("name") or "")),
        ("gen_ai.request.model", str(run.get("model") or "")),
    ]
    return {
        "resourceMetrics": [
            {
                "resource": {"attributes": _attributes(*zip(*resource, strict=True))},
                "scopeMetrics": [
                    {
                        "scope": {"name": "peakload", "version": _package_version()},
                        "metrics": metrics,
                    }
                ],
            }
        ]
    }


def run_otlp(conn: psycopg.Connection[Any], run_id: str) -> tuple[dict[str, Any], int]:
    """The run's OTLP payload from the store, and how many requests it counts."""
    requests = load_requests(conn, run_id)
    return otlp_metrics(requests, load_run(conn, run_id)), len(requests)


def write_otlp(payload: dict[str, Any], path: str | Path) -> None:
    """One JSON line, as the collector's otlpjsonfile receiver reads it."""
    Path(path).write_text(json.dumps(payload, separators=(",", ":")) + "\n", encoding="utf-8")


class PushError(Exception):
    """An OTLP endpoint did not take the payload (its status or the connection's error)."""


def push_otlp(payload: dict[str, Any], url: str, timeout_s: float = PUSH_TIMEOUT_S) -> None:
    """POST the payload to an OTLP/HTTP metrics endpoint (the full URL, e.g.
    http://127.0.0.1:4318/v1/metrics) as JSON; raises PushError unless it answers 2xx."""
    try:
        r = httpx.post(
            url,
            content=json.dumps(payload, separators=(",", ":")),
            headers={"Content-Type": "application/json"},
            timeout=timeout_s,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        raise PushError(f"OTLP push to {url}: {type(exc).__name__}: {exc}") from None
    if not 200 <= r.status_code < 300:
        raise PushError(f"OTLP push to {url}: HTTP {r.status_code} {r.text[:200]!r}")
