"""Warm-up probes a worker makes before checking in: a few HTTP round trips to the target
(without credentials) to warm the path and measure its network round trip and connection setup.
Durations from perf_counter_ns. TTFT splits into setup + network + server time from these.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import httpx

PROBES = 5
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class NetworkProbe:
    """`rtt_ns`: the fastest request on a warm connection (one network round trip plus the
    server's time to answer a trivial GET); `connect_ns`: the first request's extra time over
    that (TCP and TLS setup through whatever proxy is in between). None if unreachable."""

    rtt_ns: int | None
    connect_ns: int | None
    status: int | None
    error: str | None


def probe_network(base_url: str, probes: int = PROBES) -> NetworkProbe:
    """GET {base_url}/models `probes` times on one connection. No API key is sent: an HTTP 401
    is a round trip as good as a 200, and a key never leaves the process for a probe."""
    url = base_url.rstrip("/") + "/models"
    times: list[int] = []
    status: int | None = None
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, follow_redirects=False) as client:
            for _ in range(probes):
                t0 = time.perf_counter_ns()
                with client.stream("GET", url) as resp:
                    t1 = time.perf_counter_ns()  # response headers arrived
                    status = resp.status_code
                    resp.read()
                times.append(t1 - t0)
    except httpx.HTTPError as exc:
        return NetworkProbe(None, None, status, f"{type(exc).__name__}")
    warm = times[1:] or times
    rtt = min(warm)
    return NetworkProbe(
        rtt_ns=rtt,
        connect_ns=max(0, times[0] - int(statistics.median(warm))),
        status=status,
        error=None,
    )
