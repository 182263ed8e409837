"""The server's own view beside the client's: which scraped Prometheus series mean queue length,
running requests, KV-cache use and the server's TTFT / queue-time histograms (from the run's
preset, else the engines' well-known names), those series bucketed on the client series' time
axis beside the requests' own server timings where they report them, per-level means over each
level's steady span, and the diagnosis they support.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis import metrics as m
from loadgen.errors import SpecError
from loadgen.presets import load_preset

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
_ORIGIN = pd.Timestamp("1970-01-01", tz="UTC")  # analysis.store.load.timeseries buckets from here

# Diagnosis thresholds, stated with the numbers they judge: a latency "grows" when its p50 at
# the busiest level is at least GROWS x its p50 one level below; it is "flat" below FLAT x; a
# queue "forms" when its mean over the busiest level's steady span reaches QUEUE_FORMS and
# exceeds the level below's.
GROWS = 1.5
FLAT = 1.25
QUEUE_FORMS = 1.0


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


def _bucket(t: pd.Series, bucket_s: float) -> pd.Series:
    w = pd.Timedelta(seconds=bucket_s)
    return _ORIGIN + ((t - _ORIGIN) // w) * w


def bucketed(series: pd.DataFrame, bucket_s: float) -> pd.DataFrame:
    """Per time bucket (the buckets of analysis.store.load.timeseries): mean queue, running and KV
    use over the bucket's scrapes, and the server's mean TTFT and queue time (ms) of the
    requests its histograms counted in the bucket (delta sum / delta count)."""
    cols = ["bucket", "queue", "running", "kv_cache", "server_ttft_ms", "server_queue_ms"]
    if series.empty:
        return pd.DataFrame(columns=cols)
    frames = []
    gauges = series[series["role"].isin(GAUGES)]
    if len(gauges):
        g = gauges.assign(bucket=_bucket(gauges["t"], bucket_s))
        frames.append(g.pivot_table(index="bucket", columns="role", values="value", aggfunc="mean"))
    for role, col in (
        ("ttft_histogram", "server_ttft_ms"),
        ("queue_time_histogram", "server_queue_ms"),
    ):
        h = series[series["role"] == role].sort_values("t")
        if len(h) < 2:
            continue
        d = h.assign(
            bucket=_bucket(h["t"], bucket_s),
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
    ok = df[(df["outcome"] == "ok") & df["first_token_ns"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    arrived = ok["scheduled_at"] + pd.to_timedelta(ok["first_token_ns"].astype("float64"), "ns")
    t = pd.DataFrame({"bucket": _bucket(arrived, bucket_s), "ttft": m.ttft_ms(ok)})
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


def _mean(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    return float(v.mean()) if v.size else None


def _timings_of(sub: pd.DataFrame) -> dict[str, Any] | None:
    """The server's own account over `sub`'s requests: how many reported a prefill time (`n`)
    and a queue time (`queue_n`), and the means (ms) of the queue time, the prefill time and
    their sum, the server's TTFT (analysis.metrics.server_prefill_ms, over the requests that
    reported both); None when none reported either."""
    prefill = sub["server_prefill_ms"].to_numpy(dtype="float64")
    queue = (
        sub["server_queue_ms"].to_numpy(dtype="float64")
        if "server_queue_ms" in sub
        else np.full(len(sub), np.nan)
    )
    both = np.isfinite(prefill) & np.isfinite(queue)
    n = int(np.isfinite(prefill).sum())
    if not n and not np.isfinite(queue).any():
        return None
    return {
        "n": n,
        "queue_n": int(np.isfinite(queue).sum()),
        "queue_ms": _mean(queue),
        "prefill_ms": _mean(prefill),
        "ttft_ms": _mean(m.server_prefill_ms(sub)[both]) if both.any() else None,
    }


def level_request_timings(df: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Per level, the server's own per-request account (_timings_of) of its steady-phase ok
    requests that carry one: llama.cpp `timings`, Groq/Cerebras times, TGI headers, Ollama
    durations. Levels without any: absent."""
    out: dict[int, dict[str, Any]] = {}
    if df.empty or "server_prefill_ms" not in df:
        return out
    ok = df[(df["outcome"] == "ok") & (df["phase"] == "steady")]
    for lv, sub in ok.groupby("level"):
        timed = _timings_of(sub)
        if timed is not None:
            out[int(str(lv))] = timed
    return out


def bucket_request_timings(df: pd.DataFrame, bucket_s: float) -> dict[pd.Timestamp, dict[str, Any]]:
    """Per time bucket, the server's own per-request account (_timings_of) of the ok requests
    (any phase) whose first token arrived in it (wall clock: scheduled_at + first_token_ns,
    the axis of client_ttft_series: the server's queue and prefill end at that token)."""
    out: dict[pd.Timestamp, dict[str, Any]] = {}
    if df.empty or "server_prefill_ms" not in df:
        return out
    ok = df[(df["outcome"] == "ok") & df["first_token_ns"].notna()]
    if ok.empty:
        return out
    arrived = ok["scheduled_at"] + pd.to_timedelta(ok["first_token_ns"].astype("float64"), "ns")
    for bucket, sub in ok.groupby(_bucket(arrived, bucket_s)):
        timed = _timings_of(sub)
        if timed is not None:
            out[pd.Timestamp(bucket)] = timed
    return out


SERIES_SPLIT = ("server_ttft_ms", "server_queue_ms", "server_prefill_ms")
FROM_REQUESTS = "per-request server timings"
FROM_HISTOGRAMS = "server histograms"


def server_series(
    hist_rows: pd.DataFrame, timed: Mapping[pd.Timestamp, Mapping[str, Any]]
) -> pd.DataFrame:
    """The bucketed server rows (`bucketed`) with the server's TTFT split into queue + prefill
    per bucket, as per level (_split_of): from the requests' own timings where that bucket's
    requests report the part (`timed`, bucket_request_timings), else from the histograms.
    The histograms' means stay as `hist_ttft_ms` / `hist_queue_ms`; `timed_requests` counts
    the bucket's requests that reported a prefill time; `<column>_source` names where each of
    SERIES_SPLIT came from (FROM_REQUESTS, FROM_HISTOGRAMS, or None where neither knows)."""
    rows = hist_rows.rename(
        columns={"server_ttft_ms": "hist_ttft_ms", "server_queue_ms": "hist_queue_ms"}
    )
    if timed:
        buckets = pd.DataFrame({"bucket": pd.to_datetime(list(timed), utc=True)})
        rows = (  # `bucketed` always has its columns, rows or not
            rows.merge(buckets, on="bucket", how="outer")
            if len(rows)
            else buckets.reindex(columns=rows.columns)
        )
        rows = rows.sort_values("bucket").reset_index(drop=True)
    split = [
        _split_of(_num(ttft), _num(queue), timed.get(pd.Timestamp(b)), counted=False)
        for b, ttft, queue in zip(
            rows["bucket"], rows["hist_ttft_ms"], rows["hist_queue_ms"], strict=True
        )
    ]
    for col in SERIES_SPLIT:
        rows[col] = [sp[col] for sp in split]
        rows[f"{col}_source"] = [sp["sources"][col] for sp in split]
    rows["timed_requests"] = [sp["timed_requests"] for sp in split]
    return rows.reset_index(drop=True)


def _num(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


SPLIT_LINES = (
    ("server_queue_ms", "server queue"),
    ("server_prefill_ms", "server prefill + first step"),
    ("server_ttft_ms", "server TTFT"),
)  # the charts' lines of the server's TTFT split, each drawn once per source


def series_by_source(rows: pd.DataFrame, column: str) -> list[tuple[str, pd.Series]]:
    """`column` of server_series' rows as one series per source (values where it came from
    that source, NaN elsewhere), for charts that label each line with where it came from."""
    src = f"{column}_source"
    if rows.empty or column not in rows or src not in rows:
        return []
    values = pd.to_numeric(rows[column], errors="coerce")
    return [
        (str(name), values.where(rows[src] == name))
        for name in (FROM_REQUESTS, FROM_HISTOGRAMS)
        if ((rows[src] == name) & values.notna()).any()
    ]


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


def _split_of(
    hist_ttft: float | None,
    hist_queue: float | None,
    timed: Mapping[str, Any] | None,
    *,
    counted: bool = True,
) -> dict[str, Any]:
    """server_ttft_ms = server_queue_ms + server_prefill_ms with the source of each: the
    requests' own timings where they report the part, else the histograms (`counted`: the
    requests' source names how many reported)."""
    hist = FROM_HISTOGRAMS
    hist_prefill = (
        hist_ttft - hist_queue if hist_ttft is not None and hist_queue is not None else None
    )
    t = timed or {}
    req = f"{FROM_REQUESTS}, n={t.get('n', 0)}" if counted else FROM_REQUESTS
    queue, q_src = (t["queue_ms"], req) if t.get("queue_ms") is not None else (hist_queue, hist)
    prefill, p_src = (
        (t["prefill_ms"], req) if t.get("prefill_ms") is not None else (hist_prefill, hist)
    )
    if t.get("ttft_ms") is not None:
        ttft, t_src = t["ttft_ms"], req
    elif hist_ttft is not None:
        ttft, t_src = hist_ttft, hist
    else:
        ttft, t_src = None, None
    return {
        "server_ttft_ms": ttft,
        "server_queue_ms": queue,
        "server_prefill_ms": prefill,
        "timed_requests": t.get("n", 0),
        "sources": {
            "server_ttft_ms": t_src,
            "server_queue_ms": q_src if queue is not None else None,
            "server_prefill_ms": p_src if prefill is not None else None,
        },
    }


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
    ttft_x, tpot_x = hi[2] / lo[2], hi[3] / lo[3]
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
        "ttft_ratio": ttft_x,
        "tpot_ratio": tpot_x,
        "thresholds": {"grows": GROWS, "flat": FLAT, "queue_forms": QUEUE_FORMS},
    }
    facts = (
        f"from level {lo[0]} to {hi[0]}, p50 TTFT {lo[2]:.0f} -> {hi[2]:.0f} ms (x{ttft_x:.2f}), "
        f"p50 TPOT {lo[3]:.1f} -> {hi[3]:.1f} ms (x{tpot_x:.2f}), {queue_text}"
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
    nothing and no request reported server timings."""
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
    rows = server_series(bucketed(series, bucket_s), bucket_request_timings(df, bucket_s))
    ttft = client_ttft_series(df, bucket_s)
    if len(rows):
        rows = rows.merge(ttft, on="bucket", how="left")
    per_level = level_server_stats(series, level_spans(df), level_request_timings(df))
    found = (
        {str(r): str(g["metric"].iloc[0]) for r, g in series.groupby("role")} if len(series) else {}
    )
    return {
        "metrics": found,
        "rows": rows,
        "client_ttft": ttft,
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
