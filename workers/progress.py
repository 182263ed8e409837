"""What a distributed run looks like from the coordinator: live per-region progress (from the
ticks) as a rich table, and the per-region network split of TTFT from the warm-up probes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from rich.table import Table


def progress_table(run_id: str, regions: list[dict[str, Any]]) -> Table:
    """One row per region: shards by state, requests done, errors, in flight, tokens."""
    t = Table(title=f"run {run_id}", expand=False)
    for col in ("region", "shards", "done", "errors", "in flight", "output tokens"):
        t.add_column(col, justify="left" if col in ("region", "shards") else "right")
    for r in regions:
        states: dict[str, int] = {}
        for st in r["states"].values():
            states[st] = states.get(st, 0) + 1
        t.add_row(
            r["region"],
            " ".join(f"{n} {st}" for st, n in sorted(states.items())),
            str(r["completed"]),
            str(r["errors"]),
            str(r["in_flight"]),
            str(r["output_tokens"]),
        )
    return t


def network_breakdown(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """Per region, ms: TTFT median of `ok` requests (first token minus send), the network round
    trip (fastest warm-up probe on a warm connection, median over the region's shards),
    connection setup (first probe's extra time), and server time = TTFT - round trip. Start
    skew and clock uncertainty (max over shards) say how well the region's clocks lined up."""
    rows = conn.execute(
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
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY first_token_ns - sent_ns) AS ttft,
                   count(*) AS n
              FROM requests
             WHERE run_id = %(r)s AND outcome = 'ok' AND first_token_ns IS NOT NULL
               AND sent_ns IS NOT NULL
             GROUP BY region
        )
        SELECT s.region, q.ttft, s.rtt, s.conn_ns, s.skew, s.unc, s.suspect, coalesce(q.n, 0)
          FROM s LEFT JOIN q ON q.region = s.region ORDER BY s.region
        """,
        {"r": run_id},
    ).fetchall()

    def ms(x: Any) -> float | None:
        return None if x is None else float(x) / 1e6

    out = []
    for region, ttft, rtt, conn_ns, skew, unc, suspect, n in rows:
        server = None if ttft is None or rtt is None else max(0.0, (ttft - rtt) / 1e6)
        out.append(
            {
                "region": region,
                "requests_ok": int(n),
                "ttft_p50_ms": ms(ttft),
                "network_rtt_ms": ms(rtt),
                "connection_setup_ms": ms(conn_ns),
                "server_time_ms": server,
                "start_skew_max_ms": ms(skew),
                "clock_uncertainty_max_ms": ms(unc),
                "clock_suspect": bool(suspect),
            }
        )
    return out


def network_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="TTFT by region: network round trip, connection setup, server time (ms)")
    for col in (
        "region",
        "TTFT p50",
        "network RTT",
        "conn setup",
        "server",
        "start skew",
        "clock ±",
    ):
        t.add_column(col, justify="left" if col == "region" else "right")

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    for r in rows:
        t.add_row(
            r["region"] + (" (clock suspect)" if r["clock_suspect"] else ""),
            f(r["ttft_p50_ms"]),
            f(r["network_rtt_ms"]),
            f(r["connection_setup_ms"]),
            f(r["server_time_ms"]),
            f(r["start_skew_max_ms"]),
            f(r["clock_uncertainty_max_ms"]),
        )
    return t
