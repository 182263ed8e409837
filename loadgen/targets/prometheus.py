"""Scraping a target's Prometheus metrics endpoint during a run (vLLM, SGLang, TGI and
llama-server all expose one), so the server's own view (queue depth, KV use, batch size) sits
beside the client's measurements. Parses the text exposition format; no state between scrapes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

SCRAPE_TIMEOUT_S = 2.0
MAX_SAMPLES_PER_SCRAPE = 5000  # a runaway endpoint must not flood the store


@dataclass(frozen=True, slots=True)
class Sample:
    t_ns: int  # wall-clock ns since the epoch when the scrape's response arrived
    name: str
    labels: dict[str, str]
    value: float


def _parse_labels(text: str) -> dict[str, str]:
    """`a="x",b="y\\"z"` -> {"a": "x", "b": 'y"z'}."""
    labels: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip().lstrip(",").strip()
        j = text.find('"', eq) + 1
        out = []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                nxt = text[j + 1]
                out.append("\n" if nxt == "n" else nxt)
                j += 2
                continue
            out.append(text[j])
            j += 1
        labels[key] = "".join(out)
        i = j + 1
    return labels


def parse_exposition(text: str, t_ns: int) -> list[Sample]:
    """Samples of a Prometheus text exposition; comments, NaN and malformed lines skipped."""
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            label_text, _, value_part = rest.rpartition("}")
            labels = _parse_labels(label_text)
        else:
            name, _, value_part = line.partition(" ")
            labels = {}
        fields = value_part.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        samples.append(Sample(t_ns, name.strip(), labels, value))
        if len(samples) >= MAX_SAMPLES_PER_SCRAPE:
            break
    return samples


async def scrape_loop(
    url: str,
    interval_s: float,
    emit: Callable[[list[Sample]], None],
    wall_clock: Callable[[], int] = time.time_ns,
) -> None:
    """Scrape `url` every `interval_s` until cancelled; failures are skipped (the endpoint is
    optional evidence, never a reason to disturb the measurement)."""
    async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S, follow_redirects=False) as client:
        due = time.monotonic()
        while True:
            try:
                resp = await client.get(url)
                if resp.status_code == 200:
                    emit(parse_exposition(resp.text, wall_clock()))
            except httpx.HTTPError:
                pass
            due += interval_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))
