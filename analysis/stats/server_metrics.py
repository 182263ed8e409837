"""The server's own view beside the client's: which scraped Prometheus series mean queue length,
running requests, KV-cache use and the server's TTFT / queue-time histograms (from the run's
preset, else the engines' well-known names), those series bucketed on the client series' time
axis beside the requests' own server timings where they report them, per-level means over each
level's steady span, and the report's `server` block. The TTFT split into queue + prefill:
server_split.py; the diagnosis it supports: server_diagnosis.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis import metrics as m
from analysis.stats.server_diagnosis import diagnose
from analysis.stats.server_split import (
    _split_of,
    bucket_of,
    bucket_request_timings,
    level_request_timings,
    server_series,
)
from loadgen.errors import SpecError
from loadgen.runspec.presets import load_preset

GAUGES = ("queue", "running", "kv_cache")
HISTOGRAMS = ("ttft_histogram", "queue_time_histogram")
# The names engines export when no preset says otherwise (first match wins, per role). The
# simulated engine's come first: tests and demos run against it without a preset.
KNOWN_NAMES: dict[str, tuple[str, ...]] = {
    "queue": (
        "peakload_sim:num_requests_waiting",
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "tgi_queue_size",
        "llamacpp:requests_deferred",
        "nv_inference_pending_request_count",
    ),
    "running": (
        "peakload_sim:num_requests_running",
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
        "llamacpp:requests_processing",
    ),
    "kv_cache": (
        "peakload_sim:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "ttft_histogram": (
        "peakload_sim:time_to_first_token_seconds",
        "vllm:time_to_first_token_seconds",
        "sglang:time_to_first_token_seconds",
        "trtllm_time_to_first_token_seconds",
    ),
    "queue_time_histogram": (
        "peakload_sim:request_queue_time_seconds",
        "vllm:request_queue_time_seconds",
        "tgi_request_queue_duration",
        "trtllm_request_queue_time_seconds",
    ),
}


def _split(selector: str) -> tuple[str, dict[str, str]]:
    """`name{a="x"}` -> ("name", {"a": "x"}) (a preset's selector syntax)."""
    name, brace, rest = selector.partition("{")
    labels: dict[str, str] = {}
    if brace:
        for part in rest.rstrip("}").split(","):
            key, _, value = part.partition("=")
            if key.strip():
                labels[key.strip()] = value.strip().strip('"')
    return name.strip(), labels


def metric_names(spec: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Candidate selectors per role: the preset's (`[target] preset`) first, then KNOWN_NAMES."""
    out = {role: list(names) for role, names in KNOWN_NAMES.items()}
    target = (spec or {}).get("target") or {}
    name = target.get("preset") if isinstance(target, Mapping) else None
    if isinstance(name, str):
        try:
            mapped = load_preset(name).metrics
        except SpecError:  # a preset renamed since the run: the known names stand
            mapped = None
        if mapped is not None:
            for role in out:
                sel = str(getattr(mapped, role, "") or "")
                if sel:
                    out[role] = [sel, *(n for n in out[role] if n != sel)]
    return out


def load_samples(conn: psycopg.Connection[Any], run_id: str, names: Sequence[str]) -> pd.DataFrame:
    """Raw samples (t UTC, name, labels dict, value) of the given metric names for one run."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT t, name, labels, value FROM server_metrics "
            "WHERE run_id = %s::uuid AND name = ANY(%s) ORDER BY t",
            (run_id, list(names)),
        )
        rows = cur.fetchall()
    df = pd.DataFrame(rows, columns=["t", "name", "labels", "value"])
    df["t"] = pd.to_datetime(df["t"], utc=True)
    df["value"] = pd.to_numeric(df["value"]).astype("float64")
    return df


def _match(samples: pd.DataFrame, selector: str, suffix: str = "") -> pd.DataFrame:
    name, want = _split(selector)
    sel = samples[samples["name"] == name + suffix]
    if want and len(sel):
        keep = [all(lab.get(k) == v for k, v in want.items()) for lab in sel["labels"]]
        sel = sel[np.asarray(keep, dtype=bool)]
    return sel


def role_series(samples: pd.DataFrame, names: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """One value per scrape and role: gauges summed over label sets (several engines or
    models behind one endpoint); histograms as cumulative `sum` and `count` (seconds). Columns
    t, role, value, hist_sum, hist_count, and `metric` (the name that matched)."""
    parts: list[pd.DataFrame] = []
    for role in GAUGES:
        for selector in names.get(role, ()):
            g = _match(samples, selector)
            if len(g):
                gv = g.groupby("t")["value"].sum().reset_index()
                gv["role"], gv["metric"] = role, selector
                parts.append(gv)
                break
    for role in HISTOGRAMS:
        for selector in names.get(role, ()):
            s, c = _match(samples, selector, "_sum"), _match(samples, selector, "_count")
            if len(s) and len(c):
                hv = pd.concat(
                    [
                        s.groupby("t")["value"].sum().rename("hist_sum"),
                        c.groupby("t")["value"].sum().rename("hist_count"),
                    ],
                    axis=1,
                    join="inner",
                ).reset_index()
                hv["role"], hv["metric"], hv["value"] = role, selector, np.nan
                parts.append(hv)
                break
    cols = ["t", "role", "metric", "value", "hist_sum", "hist_count"]
    if not parts:
        return pd.DataFrame(columns=cols)
    out: pd.DataFrame = pd.concat(parts, ignore_index=True)
    for col in ("hist_sum", "hist_count"):
        if col not in out:
            out[col] = np.nan
    res: pd.DataFrame = out[cols].sort_values(["role", "t"]).reset_index(drop=True)
    return res


def bucketed(series: pd.DataFrame, bucket_s: float) -> pd.DataFrame:
    """Per time bucket (the buckets of analysis.store.buckets.timeseries): mean queue, running and
    KV use over the bucket's scrapes, and the server's mean TTFT and queue time (ms) of the
    requests its histograms counted in the bucket (delta sum / delta count)."""
    cols = ["bucket", "queue", "running", "kv_cache", "server_ttft_ms", "server_queue_ms"]
    if series.empty:
        return pd.DataFrame(columns=cols)
    frames = []
    gauges = series[series["role"].isin(GAUGES)]
    if len(gauges):
        g = gauges.assign(bucket=bucket_of(gauges["t"], bucket_s))
        frames.append(g.pivot_table(index="bucket", columns="role", values="value", aggfunc="mean"))
    for role, col in (
        ("ttft_histogram", "server_ttft_ms"),
        ("queue_time_histogram", "server_queue_ms"),
    ):
        h = series[series["role"] == role].sort_values("t")
        if len(h) < 2:
            continue
        d = h.assign(
            bucket=bucket_of(h["t"], bucket_s),
            ds=h["hist_sum"].diff().clip(lower=0),
            dc=h["hist_count"].diff().clip(lower=0),
        ).iloc[1:]
        agg = d.groupby("bucket")[["ds", "dc"]].sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            frames.append((agg["ds"] / agg["dc"] * 1e3).where(agg["dc"] > 0).rename(col).to_frame())
    out = pd.concat(frames, axis=1, sort=True) if frames else pd.DataFrame()
    out = out.reset_index().rename(columns={"index": "bucket"})
    for c in cols:
        if c not in out:
            out[c] = np.nan
    return out[cols].sort_values("bucket").reset_index(drop=True)


def client_ttft_series(df: pd.DataFrame, bucket_s: float) -> pd.DataFrame:
    """Client TTFT from send (ms) p50 and p90 per bucket of first-token arrival (wall clock:
    scheduled_at + first_token_ns), ok requests, on the same buckets as the server series."""
    cols = ["bucket", "ttft_p50_ms", "ttft_p90_ms"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    keep = np.asarray((df["outcome"] == "ok") & df["first_token_ns"].notna(), dtype=bool)
    if not keep.any():
        return pd.DataFrame(columns=cols)
    first = df["first_token_ns"][keep].astype("float64")
    arrived = df["scheduled_at"][keep] + pd.to_timedelta(first, "ns")
    t = pd.DataFrame({"bucket": bucket_of(arrived, bucket_s), "ttft": m.ttft_ms(df)[keep]})
    g = t.groupby("bucket")["ttft"]
    out = pd.DataFrame({"ttft_p50_ms": g.quantile(0.5), "ttft_p90_ms": g.quantile(0.9)})
    return out.reset_index()[cols]


def level_spans(df: pd.DataFrame) -> dict[int, tuple[pd.Timestamp, pd.Timestamp]]:
    """Each level's steady span on the wall clock: first steady schedule to last steady end."""
    out: dict[int, tuple[pd.Timestamp, pd.Timestamp]] = {}
    if df.empty:
        return out
    st = df[df["phase"] == "steady"]
    ends = st["scheduled_at"] + pd.to_timedelta(st["end_ns"].fillna(0).astype("float64"), "ns")
    for lv, idx in st.groupby("level").groups.items():
        out[int(str(lv))] = (st.loc[idx, "scheduled_at"].min(), ends.loc[idx].max())
    return out


def level_server_stats(
    series: pd.DataFrame,
    spans: Mapping[int, tuple[pd.Timestamp, pd.Timestamp]],
    timed: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[int, dict[str, Any]]:
    """Per level, over its steady span: mean and max queue, mean running, mean KV use, and the
    server's TTFT split into queue time and prefill (ms, means). The split comes from the
    requests' own server timings (`timed`, level_request_timings) where they report it, else
    from the server's TTFT and queue-time histograms (deltas across the span; prefill = TTFT -
    queue, which includes the first decode step); `sources` names where each came from, and
    `hist_ttft_ms` / `hist_queue_ms` keep the histograms' figures beside the requests'."""
    out: dict[int, dict[str, Any]] = {}
    timed = timed or {}
    for lv in sorted(set(spans) | set(timed)):
        row: dict[str, Any] = {}
        if lv in spans:
            t0, t1 = spans[lv]
            inside = series[(series["t"] >= t0) & (series["t"] <= t1)]
        else:
            inside = series.iloc[0:0]
        for role in GAUGES:
            v = inside.loc[inside["role"] == role, "value"] if len(inside) else pd.Series()
            row[f"{role}_mean"] = float(v.mean()) if len(v) else None
            if role == "queue":
                row["queue_max"] = float(v.max()) if len(v) else None
        for role, key in (
            ("ttft_histogram", "hist_ttft_ms"),
            ("queue_time_histogram", "hist_queue_ms"),
        ):
            h = inside[inside["role"] == role].sort_values("t") if len(inside) else inside
            dc = float(h["hist_count"].iloc[-1] - h["hist_count"].iloc[0]) if len(h) > 1 else 0.0
            ds = float(h["hist_sum"].iloc[-1] - h["hist_sum"].iloc[0]) if len(h) > 1 else 0.0
            row[key] = ds / dc * 1e3 if dc > 0 else None
        row.update(_split_of(row["hist_ttft_ms"], row["hist_queue_ms"], timed.get(lv)))
        out[lv] = row
    return out


def _queue_per_request(stats: Mapping[str, Any]) -> bool:
    src = (stats.get("sources") or {}).get("server_queue_ms")
    return str(src or "").startswith("per-request")


def server_section(
    conn: psycopg.Connection[Any],
    run: Mapping[str, Any],
    df: pd.DataFrame,
    summary_levels: Sequence[Mapping[str, Any]],
    bucket_s: float,
) -> dict[str, Any]:
    """The report's `server` block: which series were found, bucketed rows (server_series,
    with client TTFT), per-level stats and the diagnosis. Empty `rows` when the run scraped
    nothing and no request reported server timings. `server_basis` and `server_rows` are its
    two halves, for a caller that wants the rows at several bucket widths."""
    basis = server_basis(conn, run, df, summary_levels)
    ttft = client_ttft_series(df, bucket_s)
    rows = server_rows(basis, df, bucket_s, ttft)
    return {**{k: v for k, v in basis.items() if k != "series"}, "rows": rows, "client_ttft": ttft}


def server_basis(
    conn: psycopg.Connection[Any],
    run: Mapping[str, Any],
    df: pd.DataFrame,
    summary_levels: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """What `server_section` finds whatever the bucket width: the server's `series` by role
    (role_series), the `metrics` names found, per-level stats (`levels`) and the `diagnosis`."""
    names = metric_names(run.get("spec"))
    wanted = sorted(
        {
            _split(s)[0] + suffix
            for role, sels in names.items()
            for s in sels
            for suffix in (("_sum", "_count") if role in HISTOGRAMS else ("",))
        }
    )
    samples = load_samples(conn, str(run["run_id"]), wanted)
    series = role_series(samples, names)
    per_level = level_server_stats(series, level_spans(df), level_request_timings(df))
    found = (
        {str(r): str(g["metric"].iloc[0]) for r, g in series.groupby("role")} if len(series) else {}
    )
    return {
        "series": series,
        "metrics": found,
        "levels": per_level,
        "diagnosis": diagnose(summary_levels, per_level)
        if "queue" in found or any(_queue_per_request(s) for s in per_level.values())
        else {
            "verdict": "unknown",
            "sentence": "No diagnosis: the run stored no server queue series and its server "
            "reported no per-request queue time (set target.metrics_url to the engine's "
            "Prometheus endpoint).",
            "numbers": {},
        },
    }


def server_rows(
    basis: Mapping[str, Any],
    df: pd.DataFrame,
    bucket_s: float,
    client_ttft: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per `bucket_s` bucket: the server's series bucketed beside its requests' own timings
    (server_series), with the client's TTFT p50/p90 joined (`client_ttft`, computed when not
    given); empty, and the client's series not computed, when the server gave nothing."""
    rows = server_series(bucketed(basis["series"], bucket_s), bucket_request_timings(df, bucket_s))
    if len(rows):
        ttft = client_ttft_series(df, bucket_s) if client_ttft is None else client_ttft
        rows = rows.merge(ttft, on="bucket", how="left")
    return rows
