"""Where the time went, from the client's latencies per level and the server's own account
(server_metrics.level_server_stats): admission, decoding, both, neither, or unknown, and the
sentences that say it with the server's TTFT split and its sources.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# Diagnosis thresholds, stated with the numbers they judge: a latency "grows" when its p50 at
# the busiest level is at least GROWS x its p50 one level below; it is "flat" below FLAT x; a
# queue "forms" when its mean over the busiest level's steady span reaches QUEUE_FORMS and
# exceeds the level below's.
GROWS = 1.5
FLAT = 1.25
QUEUE_FORMS = 1.0


def _p50(entry: Mapping[str, Any], metric: str) -> float | None:
    v = (entry.get(metric) or {}).get("p50")
    return float(v) if v is not None and math.isfinite(float(v)) else None


def diagnose(
    levels: Sequence[Mapping[str, Any]], server: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    """Where the time went, from the summary's levels (client TTFT and TPOT p50) and the
    server's account per level: "admission" (TTFT grows with the queue while time per token
    stays flat), "decoding" (time per token grows while no queue forms), "both", "neither", or
    "unknown" (no server queue evidence, or fewer than two levels with latencies). It compares
    the busiest level with the one below it (by configured load): what the last step up in
    load did. Queue evidence: the scraped queue gauge (a queue "forms": its mean reaches
    QUEUE_FORMS and grows), else the requests' own server queue times (a queue forms when the
    server's mean queue time grew by at least half the growth of client TTFT p50). The
    sentence also gives the server's own TTFT split at the busiest level, with its source.
    Returns verdict, sentence and the numbers behind it."""
    rows = []
    for e in levels:
        lv = int(e["level"])
        srv = server.get(lv) or {}
        q = srv.get("queue_mean")
        sources = srv.get("sources") or {}
        per_req = str(sources.get("server_queue_ms") or "").startswith("per-request")
        qt = srv.get("server_queue_ms") if per_req else None
        ttft, tpot = _p50(e, "ttft_ms"), _p50(e, "tpot_ms")
        if ttft is not None and tpot is not None:
            rows.append((lv, e.get("value"), ttft, tpot, q, qt))
    gauge = any(r[4] is not None for r in rows)
    timed = sum(r[5] is not None for r in rows) >= 2
    if len(rows) < 2 or not (gauge or timed):
        why = (
            "no server queue series or per-request queue times"
            if rows
            else "no level with latencies"
        )
        if len(rows) == 1:
            why = "one level only: nothing to compare"
        return {"verdict": "unknown", "sentence": f"No diagnosis: {why}.", "numbers": {}}
    # by configured load where it is known, else level order
    rows.sort(key=lambda r: (float(r[1]) if r[1] is not None else float(r[0]), r[0]))
    lo, hi = rows[-2], rows[-1]
    ttft_x, tpot_x = _growth(hi[2], lo[2]), _growth(hi[3], lo[3])
    q_lo, q_hi = lo[4] or 0.0, hi[4] or 0.0
    if gauge:
        queue_formed = q_hi >= QUEUE_FORMS and q_hi > q_lo
        queue_text = f"server queue mean {q_lo:.1f} -> {q_hi:.1f}"
    else:
        qt_lo, qt_hi = lo[5] or 0.0, hi[5] or 0.0
        queue_formed = qt_hi - qt_lo >= 0.5 * (hi[2] - lo[2]) and qt_hi > qt_lo
        queue_text = f"server queue time mean {qt_lo:.0f} -> {qt_hi:.0f} ms (per request)"
    numbers: dict[str, Any] = {
        "baseline_level": lo[0],
        "busiest_level": hi[0],
        "ttft_p50_ms": [lo[2], hi[2]],
        "tpot_p50_ms": [lo[3], hi[3]],
        "queue_mean": [q_lo, q_hi] if gauge else None,
        "server_queue_ms": [lo[5], hi[5]],
        "queue_evidence": "queue gauge" if gauge else "per-request server queue times",
        "ttft_ratio": ttft_x if math.isfinite(ttft_x) else None,
        "tpot_ratio": tpot_x if math.isfinite(tpot_x) else None,
        "thresholds": {"grows": GROWS, "flat": FLAT, "queue_forms": QUEUE_FORMS},
    }
    facts = (
        f"from level {lo[0]} to {hi[0]}, "
        f"p50 TTFT {lo[2]:.0f} -> {hi[2]:.0f} ms ({_times(ttft_x)}), "
        f"p50 TPOT {lo[3]:.1f} -> {hi[3]:.1f} ms ({_times(tpot_x)}), {queue_text}"
    )
    split = split_sentence(hi[0], server.get(hi[0]) or {})
    if split:
        numbers["server_split"] = {
            k: (server.get(hi[0]) or {}).get(k)
            for k in ("server_ttft_ms", "server_queue_ms", "server_prefill_ms", "sources")
        }
    if ttft_x >= GROWS and queue_formed and tpot_x < FLAT:
        verdict = "admission"
        sentence = (
            f"TTFT grows with the server's queue while time per token stays flat: the "
            f"bottleneck is admission, not decoding ({facts})."
        )
    elif tpot_x >= GROWS and not queue_formed:
        verdict = "decoding"
        sentence = (
            f"Time per token grows while no queue forms: the bottleneck is decoding, not "
            f"admission ({facts})."
        )
    elif ttft_x >= GROWS and queue_formed and tpot_x >= FLAT:
        verdict = "both"
        sentence = f"TTFT grows with the queue and time per token grows too: both ({facts})."
    elif ttft_x < FLAT and tpot_x < FLAT:
        verdict = "neither"
        sentence = (
            f"Neither TTFT nor time per token grows with load: no bottleneck reached ({facts})."
        )
    else:
        verdict = "unclear"
        sentence = f"The data support no single bottleneck ({facts})."
    if split:
        sentence += " " + split
    return {"verdict": verdict, "sentence": sentence, "numbers": numbers}


def _growth(hi: float, lo: float) -> float:
    """How many times `lo` a p50 became: hi / lo. From a zero p50 (a level whose typical
    request the client read whole in one go, so its time per token was 0 ms): 1 when it is still
    zero (nothing grew), else infinite (it grew from nothing)."""
    if lo > 0:
        return hi / lo
    return 1.0 if hi <= 0 else math.inf


def _times(ratio: float) -> str:
    return f"x{ratio:.2f}" if math.isfinite(ratio) else "up from 0"


def split_sentence(level: int, stats: Mapping[str, Any]) -> str:
    """ "At level N the server's own TTFT is Q ms queue + P ms prefill (source)", or "" when
    neither part is known."""
    q, p = stats.get("server_queue_ms"), stats.get("server_prefill_ms")
    if q is None and p is None:
        return ""
    src = stats.get("sources") or {}
    q_src, p_src = src.get("server_queue_ms"), src.get("server_prefill_ms")
    parts = []
    if q is not None:
        parts.append(f"{q:.0f} ms queue" + (f" ({q_src})" if q_src != p_src else ""))
    if p is not None:
        parts.append(f"{p:.0f} ms prefill and first step ({p_src})")
    if q is None:
        parts.append("queue not reported")
    return f"At level {level} the server's own TTFT mean is " + " + ".join(parts) + "."


def split_sources(stats: Mapping[str, Any]) -> str:
    """Where a level's server TTFT / queue / prefill figures came from, briefly."""
    src = stats.get("sources") or {}
    names = {"server_ttft_ms": "TTFT", "server_queue_ms": "queue", "server_prefill_ms": "prefill"}
    by: dict[str, list[str]] = {}
    for key, label in names.items():
        if src.get(key):
            by.setdefault(str(src[key]), []).append(label)
    return "; ".join(f"{'/'.join(v)}: {k}" for k, v in by.items()) or "—"
