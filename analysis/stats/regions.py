"""Per region, where TTFT went: connection set-up, the network round trip and the server's
time at p50/p90/p99, and how well the region's clocks lined up. From what each run stores:
every shard's warm-up probes (network_rtt_ns: fastest round trip on a warm connection;
connect_ns: the first probe's extra time to open one), each request's TTFT, and where the
store has them (migration 0120) each request's own connection set-up.

Server time is the server's own account where every such request carries one with both parts
(queue + prefill per request: Groq/Cerebras times, TGI headers), else TTFT from send - the
region's network round trip: shifting a distribution by a constant shifts every percentile by
it, so server p99 = TTFT p99 - RTT. `server_time_source` says which. Where requests report
only some parts (llama.cpp: prefill, no queue), those parts are given beside it. ms throughout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

from analysis import metrics as m
from loadgen.results import formulas

PCTS = (50.0, 90.0, 99.0)
FROM_RTT = "TTFT from send - probe round trip"
FROM_SERVER = "server-reported queue + prefill per request"
# a shard less sure of its clock offset than this is marked (workers.clocks' bound, restated:
# analysis reads the store, never the workers package)
MAX_CLOCK_UNCERTAINTY_MS = 5.0


def shard_probes(conn: psycopg.Connection[Any], run_id: str) -> pd.DataFrame:
    """Per shard: region, probe round trip and connection set-up, clock offset and uncertainty
    (ns), suspect flag."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT shard_id, region, network_rtt_ns, connect_ns, clock_offset_ns, "
            "clock_uncertainty_ns, clock_suspect FROM shards WHERE run_id = %s::uuid "
            "ORDER BY region, shard_id",
            (run_id,),
        )
        rows = cur.fetchall()
    cols = [
        "shard_id",
        "region",
        "network_rtt_ns",
        "connect_ns",
        "clock_offset_ns",
        "clock_uncertainty_ns",
        "clock_suspect",
    ]
    df = pd.DataFrame(rows, columns=cols)
    for c in cols[2:6]:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    v = values[np.isfinite(values)]
    if not len(v):
        return {f"p{q:g}": None for q in PCTS}
    return {f"p{q:g}": float(x) for q, x in zip(PCTS, m.percentile(v, list(PCTS)), strict=True)}


def _median(x: pd.Series) -> float | None:
    v = x.dropna()
    return float(v.median()) if len(v) else None


class _PerRequest:
    """The per-request values the breakdown reads, computed once over the whole frame and
    masked per region: masking the frame itself per region copied every column (at 10M
    requests, 7 s of a Run page)."""

    def __init__(self, df: pd.DataFrame) -> None:
        n = len(df)
        self.ttft = m.ttft_ms(df) if n else np.zeros(0)
        nan = np.full(n, np.nan)
        self.prefill = (
            df["server_prefill_ms"].to_numpy(dtype="float64") if "server_prefill_ms" in df else nan
        )
        self.queue = (
            df["server_queue_ms"].to_numpy(dtype="float64") if "server_queue_ms" in df else nan
        )
        self.server_ttft = m.server_prefill_ms(df) if n else np.zeros(0)
        self.connect = (
            df["connect_ns"].to_numpy(dtype="float64") / 1e6 if "connect_ns" in df else None
        )


def _reported(v: _PerRequest, rows: np.ndarray) -> dict[str, Any]:
    """The requests' own server timings: how many report any (`n`), the queue and prefill
    times and their sum (analysis.metrics.server_prefill_ms, over requests reporting both) at
    p50/p90/p99, and whether every request reports both parts (`all_both`)."""
    prefill, queue = v.prefill[rows], v.queue[rows]
    both = np.isfinite(prefill) & np.isfinite(queue)
    total = v.server_ttft[rows][both] if both.any() else np.zeros(0)
    return {
        "n": int((np.isfinite(prefill) | np.isfinite(queue)).sum()),
        "queue_ms": _pcts(queue),
        "prefill_ms": _pcts(prefill),
        "ttft_ms": _pcts(total),
        "all_both": bool(prefill.size) and bool(both.all()),
    }


def region_breakdown(df: pd.DataFrame, shards: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per region (steady-phase ok requests): TTFT, server time (and its source),
    the server-reported queue and prefill times, and (per request, where stored) connection
    set-up at p50/p90/p99; the probes' round trip and set-up (median
    over the region's shards); the clock offset range and the largest uncertainty, with the
    shards whose offset is uncertain beyond the bound."""
    out = []
    codes: np.ndarray = np.zeros(0, np.int64)
    code_of: dict[Any, int] = {}  # codes, not 10M string comparisons
    if len(df):
        codes, names = pd.factorize(df["region"])
        code_of = {name: i for i, name in enumerate(names.tolist())}
    regions = sorted(set(shards["region"]) | set(code_of))
    ok = ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy() if len(df) else None
    values = _PerRequest(df)
    for region in regions:
        sh = shards[shards["region"] == region]
        rows = codes == code_of.get(region, -2)  # -1 is a missing region: in none
        if ok is not None:
            rows &= ok
        ttft = values.ttft[rows]
        rtt_ns = _median(sh["network_rtt_ns"])
        rtt = rtt_ns / 1e6 if rtt_ns is not None else None
        ttft_p = _pcts(ttft)
        reported = _reported(values, rows)
        if reported["all_both"]:
            server, source = reported["ttft_ms"], FROM_SERVER
        else:
            server = {
                k: (max(0.0, v - rtt) if v is not None and rtt is not None else None)
                for k, v in ttft_p.items()
            }
            source = FROM_RTT
        per_req_connect = (
            _pcts(values.connect[rows])
            if values.connect is not None
            else {f"p{q:g}": None for q in PCTS}
        )
        unc = sh["clock_uncertainty_ns"].dropna() / 1e6
        off = sh["clock_offset_ns"].dropna() / 1e6
        suspect = [
            str(s)
            for s, flag, u in zip(
                sh["shard_id"], sh["clock_suspect"], sh["clock_uncertainty_ns"], strict=True
            )
            if bool(flag) or (pd.notna(u) and u / 1e6 > MAX_CLOCK_UNCERTAINTY_MS)
        ]
        conn_probe = _median(sh["connect_ns"])
        out.append(
            {
                "region": str(region),
                "requests_ok": int(rows.sum()),
                "ttft_ms": ttft_p,
                "network_rtt_ms": rtt,
                "server_time_ms": server,
                "server_time_source": source,
                "server_reported_n": reported["n"],
                "server_queue_ms": reported["queue_ms"],
                "server_prefill_ms": reported["prefill_ms"],
                "connection_setup_ms": conn_probe / 1e6 if conn_probe is not None else None,
                "connection_setup_per_request_ms": per_req_connect,
                "clock_offset_ms": [float(off.min()), float(off.max())] if len(off) else None,
                "clock_uncertainty_ms": float(unc.max()) if len(unc) else None,
                "clock_suspect_shards": suspect,
            }
        )
    return out


def compare_regions(
    base: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Regions both runs have: network round trip, server time p50/p99 and connection set-up,
    baseline vs candidate (informational; compare's verdict stays analysis.verdicts.regression's). A
    server time whose source differs between the runs (the server's own account in one,
    TTFT - round trip in the other) is marked and given no change."""
    b_by = {r["region"]: r for r in base}
    rows = []
    for c in cand:
        b = b_by.get(c["region"])
        if b is None:
            continue
        for name, key, sub in (
            ("network_rtt_ms", "network_rtt_ms", None),
            ("connection_setup_ms", "connection_setup_ms", None),
            ("server_time_p50_ms", "server_time_ms", "p50"),
            ("server_time_p99_ms", "server_time_ms", "p99"),
        ):
            bv, cv = (r[key] if sub is None else (r[key] or {}).get(sub) for r in (b, c))
            # server times measured two different ways are not one quantity changing
            same = key != "server_time_ms" or b.get("server_time_source") == c.get(
                "server_time_source"
            )
            rows.append(
                {
                    "region": c["region"],
                    "metric": name if same else f"{name} (sources differ)",
                    "baseline": bv,
                    "candidate": cv,
                    "change_pct": (cv - bv) / bv * 100 if same and bv and cv is not None else None,
                }
            )
    return rows


def network_breakdown(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """Per region, ms, straight from the store (`peakload submit`'s summary): TTFT median of
    `ok` requests (loadgen.results.formulas.TTFT, in SQL), the network round trip (fastest warm-up
    probe on a warm connection, median over the region's shards), connection setup (first probe's
    extra time), and server time = TTFT - round trip. Start skew and clock uncertainty (max
    over shards) say how well the region's clocks lined up."""
    query = sql.SQL(
        """
        WITH s AS (
            SELECT region,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY network_rtt_ns) AS rtt,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY connect_ns) AS conn_ns,
                   max(abs(start_skew_ns)) AS skew, max(clock_uncertainty_ns) AS unc,
                   bool_or(clock_suspect) AS suspect
              FROM shards WHERE run_id = %(r)s GROUP BY region
        ), q AS (
            SELECT region,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY {ttft}) AS ttft_ms,
                   count(*) AS n
              FROM requests
             WHERE run_id = %(r)s AND outcome = 'ok' AND first_token_ns IS NOT NULL
               AND sent_ns IS NOT NULL
             GROUP BY region
        )
        SELECT s.region, q.ttft_ms, s.rtt, s.conn_ns, s.skew, s.unc, s.suspect, coalesce(q.n, 0)
          FROM s LEFT JOIN q ON q.region = s.region ORDER BY s.region
        """
    ).format(ttft=sql.SQL(formulas.TTFT.sql))
    rows = conn.execute(query, {"r": run_id}).fetchall()

    def ms(x: Any) -> float | None:
        return None if x is None else float(x) / 1e6

    out = []
    for region, ttft, rtt, conn_ns, skew, unc, suspect, n in rows:
        server = None if ttft is None or rtt is None else max(0.0, ttft - float(rtt) / 1e6)
        out.append(
            {
                "region": region,
                "requests_ok": int(n),
                "ttft_p50_ms": None if ttft is None else float(ttft),
                "network_rtt_ms": ms(rtt),
                "connection_setup_ms": ms(conn_ns),
                "server_time_ms": server,
                "start_skew_max_ms": ms(skew),
                "clock_uncertainty_max_ms": ms(unc),
                "clock_suspect": bool(suspect),
            }
        )
    return out
