"""Nightly history: one per-request metric's percentile across the runs of a schedule
(runs.schedule_name), computed in SQL (`percentile_cont`, the same linear interpolation as numpy),
change points in that series by binary segmentation on the mean with a BIC-type penalty, and
the size and direction of each change, and the verdict a nightly job is judged by (`verdict`:
`peakload nightly` and the Nightly page both present it).

Binary segmentation (Scott & Knott 1974; Killick & Eckley's `changepoint` uses the same cost):
the cost of a segment is its sum of squared deviations from its mean; the best split of a
segment is the one that lowers the cost most; it is kept if the gain exceeds the penalty
2·σ²·ln(n) (BIC for one extra mean parameter under Gaussian noise of variance σ²), and both
halves are searched again. The noise sigma is estimated robustly from first differences,
median(|Δx|)/(0.6745·√2) (see `noise_sigma`), so steps do not inflate it. Segments shorter
than `min_size` are not split off. Error control across the family (every split position of
the history searched at once): the penalty is at least c·sigma_hat², c the (1 - alpha) quantile
of the best split's gain over series without a change (analysis.stats.segmentation_null), so a
history with no change shows a change point, hence a regression, at most alpha = 1 - confidence
of the time. The series is of per-run values, so run-to-run variation is in the noise it is
judged by.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import psycopg
from psycopg import sql

from analysis.stats.segmentation_null import family_statement, familywise_penalty_factor
from analysis.verdicts.exitcodes import Exit, run_state_code
from loadgen.results import formulas

# per-request metrics computed in SQL: their loadgen.results.formulas SQL forms (ms; output speed in
# tokens/s)
_SQL_METRICS = {
    name: formulas.REQUEST_METRICS[name].sql
    for name in ("ttft_ms", "ttfat_ms", "e2e_ms", "tpot_ms", "output_speed_tps")
}
# not a per-request value: each run's share of steady-phase requests not ok (`not_sent` too),
# the same error rate as analysis.verdicts.verdict's budget; the percentile does not apply
ERROR_RATE = "error_rate"
METRICS = (*_SQL_METRICS, ERROR_RATE)
UNITS = {**{m: formulas.REQUEST_METRICS[m].unit for m in _SQL_METRICS}, ERROR_RATE: "fraction"}
# a rise in these is an improvement; in every other metric (latencies) a rise is a regression
HIGHER_IS_BETTER = frozenset({"output_speed_tps"})
# runs; a new level is only found once it has lasted this long, so detection needs twice as many
MIN_SEGMENT = 3
HISTORY_LIMIT = 365  # runs read unless told otherwise: a year of nightlies
DEFAULT_CONFIDENCE = 0.95  # the family-wise rate of false change points is 1 - this


def schedule_names(conn: psycopg.Connection[Any]) -> list[str]:
    """Names of the schedules that have at least one stored run, in code-point order (as
    Python sorts them, whatever the database's collation)."""
    with conn.cursor() as cur:
        cur.execute(
            'SELECT DISTINCT schedule_name COLLATE "C" FROM runs '
            "WHERE schedule_name IS NOT NULL ORDER BY 1"
        )
        return [str(r[0]) for r in cur.fetchall()]


def schedule_history(
    conn: psycopg.Connection[Any],
    schedule_name: str,
    *,
    metric: str = "ttft_ms",
    percentile: float = 99.0,
    level: int | None = None,
    limit: int = HISTORY_LIMIT,
    since: dt.datetime | None = None,
) -> pd.DataFrame:
    """The newest `limit` runs of the schedule created at or after `since` (wall clock, aware),
    one row each, oldest first: run_id, name, created_at, started_at, status, valid, value (the
    pooled `percentile` of `metric` over ok steady requests, in UNITS[metric]; for ERROR_RATE
    the share of steady requests not ok), n (the samples behind the value)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if not 0 <= percentile <= 100:
        raise ValueError(f"percentile must be within 0..100 (got {percentile})")
    level_filter = sql.SQL("AND q.level = %(level)s") if level is not None else sql.SQL("")
    since_filter = sql.SQL("AND created_at >= %(since)s") if since is not None else sql.SQL("")
    if metric == ERROR_RATE:
        per_run = sql.SQL(
            """SELECT avg((q.outcome <> 'ok')::int)::float8 AS value, count(*) AS n
            FROM requests q WHERE q.run_id = r.run_id AND q.phase = 'steady' {level_filter}"""
        ).format(level_filter=level_filter)
    else:
        per_run = sql.SQL(
            """SELECT percentile_cont(%(p)s) WITHIN GROUP (ORDER BY v) AS value, count(v) AS n
            FROM (SELECT ({expr})::float8 AS v FROM requests q
                  WHERE q.run_id = r.run_id AND q.outcome = 'ok' AND q.phase = 'steady'
                  {level_filter}) x
            WHERE v IS NOT NULL"""
        ).format(expr=sql.SQL(_SQL_METRICS[metric]), level_filter=level_filter)
    query = sql.SQL(
        """
        SELECT r.run_id::text AS run_id, r.name, r.created_at, r.started_at, r.status, r.valid,
               s.value, COALESCE(s.n, 0) AS n
        FROM (SELECT * FROM runs WHERE schedule_name = %(schedule)s {since_filter}
              ORDER BY created_at DESC LIMIT %(limit)s) r
        LEFT JOIN LATERAL ({per_run}) s ON true
        ORDER BY r.created_at, r.run_id
        """
    ).format(per_run=per_run, since_filter=since_filter)
    params = {
        "schedule": schedule_name,
        "limit": int(limit),
        "p": percentile / 100.0,
        "level": level,
        "since": since,
    }
    with conn.cursor() as cur:
        cur.execute(query, params)
        rows = cur.fetchall()
        names = [d.name for d in cur.description or ()]
    df = pd.DataFrame.from_records(rows, columns=names)
    df["created_at"] = pd.to_datetime(df["created_at"], utc=True)
    df["started_at"] = pd.to_datetime(df["started_at"], utc=True)
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype("float64")
    return df


def noise_sigma(x: npt.ArrayLike) -> float:
    """Robust noise level from the first differences Δx (noise of sd √2·sigma, but for the
    few steps): median(|Δx|)/(0.6745·√2); when over half of them are exactly zero (quantized
    values), mean(|Δx|)·√π/2 (E|Δx| = 2·sigma/√π for Gaussian noise). Not a MAD about the
    median of Δx: noise whose differences take two values (e.g. a weekly pattern) has a MAD of
    0, and then every wiggle became a change point."""
    d = np.abs(np.diff(np.asarray(x, dtype=np.float64)))
    if d.size == 0:
        return 0.0
    med = float(np.median(d))
    if med > 0.0:
        return float(med / (0.6745 * np.sqrt(2.0)))
    return float(np.mean(d) * np.sqrt(np.pi) / 2.0)


def change_points(
    x: npt.ArrayLike,
    *,
    min_size: int = MIN_SEGMENT,
    penalty: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[int]:
    """Indices i where a new mean starts (x[i] is the first value of the new segment), sorted.
    NaNs are not allowed (drop them first). See the module docstring for the method; the
    default penalty is the larger of BIC's and the family-wise one at 1 - `confidence`."""
    v = np.asarray(x, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("change_points needs finite values: drop runs without a value first")
    n = v.size
    if n < 2 * min_size:
        return []
    if penalty is None:
        sigma = noise_sigma(v)
        if sigma == 0.0:
            sigma = max(float(np.std(v)) * 1e-3, 1e-12)
        c = familywise_penalty_factor(n, min_size, 1.0 - confidence, noise_sigma)
        penalty = max(2.0 * np.log(n), c) * sigma**2
    csum = np.r_[0.0, np.cumsum(v)]
    csq = np.r_[0.0, np.cumsum(v * v)]

    def cost(a: int, b: int) -> float:  # squared deviations of v[a:b] from its mean
        s = csum[b] - csum[a]
        return float(csq[b] - csq[a] - s * s / (b - a))

    found: list[int] = []
    stack = [(0, n)]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        ks = np.arange(a + min_size, b - min_size + 1)
        left_s = csum[ks] - csum[a]
        right_s = csum[b] - csum[ks]
        left = csq[ks] - csq[a] - left_s**2 / (ks - a)
        right = csq[b] - csq[ks] - right_s**2 / (b - ks)
        gains = cost(a, b) - (left + right)
        best = int(np.argmax(gains))
        if gains[best] > penalty:
            k = int(ks[best])
            found.append(k)
            stack += [(a, k), (k, b)]
    return sorted(found)


def history_with_changes(
    conn: psycopg.Connection[Any],
    schedule_name: str,
    *,
    valid_only: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
    **kwargs: Any,
) -> tuple[pd.DataFrame, list[int]]:
    """The schedule's history (`schedule_history`'s keywords) and the change points of its
    values; indices refer to the returned frame's rows. Runs without a value are left out of the
    detection, and with `valid_only` so are runs not marked valid (flagged invalid, or not ended:
    `valid` is NULL until then). Adds `excluded` (why a run was left out, "" when it was used)
    and `segment` (NaN for runs left out)."""
    hist = schedule_history(conn, schedule_name, **kwargs)
    hist["excluded"] = exclusion_reasons(hist, valid_only=valid_only)
    has = (hist["excluded"] == "").to_numpy()
    idx = np.flatnonzero(has)
    values = hist["value"].to_numpy()[has]
    cps = change_points(values, confidence=confidence) if has.any() else []
    hist["segment"] = np.nan
    starts = [0, *cps]
    for seg, s in enumerate(starts):
        end = cps[seg] if seg < len(cps) else len(idx)
        hist.loc[hist.index[idx[s:end]], "segment"] = seg
    return hist, [int(idx[c]) for c in cps]


def exclusion_reasons(hist: pd.DataFrame, *, valid_only: bool) -> list[str]:
    """Per run of a history, why it cannot take part in change-point detection ("" if it can)."""
    out = []
    for value, valid in zip(hist["value"], hist["valid"], strict=True):
        if not np.isfinite(value):
            out.append("no value (no ok steady requests)")
        elif valid_only and pd.isna(valid):
            out.append("not ended (validity unknown)")
        elif valid_only and not bool(valid):
            out.append("invalid")
        else:
            out.append("")
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """A change point of a history: the row where a new level starts, and the means of the
    segments before and after it (in the metric's units)."""

    index: int
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def delta_pct(self) -> float:
        """The change relative to the level before, in percent (±inf from a level of zero)."""
        if self.before == 0:
            return math.copysign(math.inf, self.delta) if self.delta else 0.0
        return 100.0 * self.delta / abs(self.before)

    def worse(self, metric: str) -> bool:
        """A rise in a latency, or a fall in a metric in HIGHER_IS_BETTER."""
        return self.delta < 0 if metric in HIGHER_IS_BETTER else self.delta > 0

    def regression(self, metric: str, threshold_pct: float) -> bool:
        """Worse by more than `threshold_pct` percent of the level before."""
        return self.worse(metric) and abs(self.delta_pct) > threshold_pct


def changes(hist: pd.DataFrame, cps: list[int]) -> list[Change]:
    """Each change point of `history_with_changes` with the mean of its segment and the one
    before (the same means the segmentation compared)."""
    means = hist.groupby("segment")["value"].mean()
    out = []
    for c in cps:
        seg = hist["segment"].iloc[c]
        out.append(Change(index=c, before=float(means[seg - 1]), after=float(means[seg])))
    return out


# ---------------------------------------------------------------- the verdict

MIN_RUNS = 2 * MIN_SEGMENT  # usable runs the detection needs
DEFAULT_THRESHOLD_PCT = 5.0


def judge_schedule(
    conn: psycopg.Connection[Any],
    schedule_name: str,
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    include_invalid: bool = False,
    metric: str = "ttft_ms",
    confidence: float = DEFAULT_CONFIDENCE,
    **kwargs: Any,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The schedule's history (`history_with_changes`, `schedule_history`'s keywords; invalid
    and unended runs left out of the detection unless `include_invalid`) and its `verdict`."""
    valid_only = not include_invalid
    hist, cps = history_with_changes(
        conn, schedule_name, valid_only=valid_only, metric=metric, confidence=confidence, **kwargs
    )
    result = verdict(hist, cps, metric, threshold_pct, include_invalid=include_invalid)
    used = int((hist["excluded"] == "").sum()) if len(hist) else 0
    result["family"] = family_statement(used, MIN_SEGMENT, confidence)
    return hist, result


def verdict(
    hist: pd.DataFrame,
    cps: list[int],
    metric: str,
    threshold_pct: float,
    *,
    include_invalid: bool = False,
) -> dict[str, Any]:
    """Everything a nightly job is judged by (`peakload nightly` prints and writes it, the
    Nightly page shows it): runs, change points, verdict and exit code
    (analysis.verdicts.exitcodes).

    The verdict comes from the latest change point larger than `threshold_pct` (a smaller,
    later one must not hide a regression before it): "regression" (exit 1) if it is worse,
    else "no regression" (0); "too few runs" (3) with fewer than MIN_RUNS usable. Then the
    newest run decides first (see `_gate_newest`): no value (3), invalid (4), partial or not
    ended (5), unless `include_invalid`; the history's own verdict is kept as
    `detection_verdict`/`detection_exit_code` then."""
    result = _result(hist, cps, metric, threshold_pct)
    _gate_newest(result, include_invalid)
    return result


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _iso(t: Any) -> str | None:
    return None if pd.isna(t) else pd.Timestamp(t).isoformat()


def _result(
    hist: pd.DataFrame, cps: list[int], metric: str, threshold_pct: float
) -> dict[str, Any]:
    found = changes(hist, cps)
    by_index = {c.index: c for c in found}
    runs = []
    for i, r in enumerate(hist.to_dict("records")):
        runs.append(
            {
                "run_id": r["run_id"],
                "name": r["name"],
                "created_at": _iso(r["created_at"]),
                "started_at": _iso(r["started_at"]),
                "status": r["status"],
                "valid": None if pd.isna(r["valid"]) else bool(r["valid"]),
                "value": _num(r["value"]),
                "n": int(r["n"]),
                "used": r["excluded"] == "",
                "excluded": r["excluded"] or None,
                "segment": None if pd.isna(r["segment"]) else int(r["segment"]),
                "change_point": i in by_index,
            }
        )
    points = [
        {
            "run_id": runs[c.index]["run_id"],
            "index": c.index,
            "started_at": runs[c.index]["started_at"],
            "before": c.before,
            "after": c.after,
            "delta": c.delta,
            "delta_pct": _num(c.delta_pct),
            "direction": "up" if c.delta > 0 else "down",
            "worse": c.worse(metric),
            "regression": c.regression(metric, threshold_pct),
        }
        for c in found
    ]
    used = sum(1 for r in runs if r["used"])
    # delta_pct is None only from a level of zero: any change from there is large
    large = [p for p in points if p["delta_pct"] is None or abs(p["delta_pct"]) > threshold_pct]
    deciding = large[-1] if large else None
    if used < MIN_RUNS:
        word, code = "too few runs", Exit.UNDECIDABLE
    elif deciding is not None and deciding["regression"]:
        word, code = "regression", Exit.FAILED
    else:
        word, code = "no regression", Exit.PASSED
    return {
        "runs": runs,
        "runs_used": used,
        "change_points": points,
        "latest_change_point": points[-1] if points else None,
        "deciding_change_point": deciding,
        "verdict": word,
        "exit_code": code,
    }


def _gate_newest(result: dict[str, Any], include_invalid: bool) -> None:
    """The newest run decides first: a nightly job must not pass on a run that has no value,
    or (unless invalid runs are let in) is partial or invalid, whatever the history says."""
    runs = result["runs"]
    if not runs:
        return
    newest = runs[-1]
    code = None if include_invalid else run_state_code(newest["status"], newest["valid"])
    if code is None and newest["value"] is None:
        code = Exit.UNDECIDABLE
    if code is None:
        return
    state = (
        "has no value (no steady requests to measure)"
        if code is Exit.UNDECIDABLE
        else "is invalid"
        if code is Exit.INVALID
        else f"is {newest['status']}" + ("" if newest["valid"] is not None else ", not judged")
    )
    result["newest_run_problem"] = f"the newest run {newest['run_id'][:8]} {state}"
    result["detection_verdict"], result["detection_exit_code"] = (
        result["verdict"],
        result["exit_code"],
    )
    result["verdict"] = code.name.lower()
    result["exit_code"] = int(code)


def pct_text(x: float | None) -> str:
    """A change in percent as the verdict words it: "+12.3%" ("—" for a change from zero)."""
    return "—" if x is None else f"{x:+.1f}%"


def verdict_reason(result: dict[str, Any], metric: str, threshold_pct: float) -> str:
    """The history's verdict in one sentence (before the newest run's own state, which
    `result["newest_run_problem"]` words when it decides instead)."""
    code = result.get("detection_exit_code", result["exit_code"])
    p = result["deciding_change_point"]
    beyond = f"the latest change point beyond the {threshold_pct:g}% threshold"
    if code == Exit.UNDECIDABLE:
        return (
            f"Too few runs to decide: {result['runs_used']} usable, the detection needs "
            f"at least {MIN_RUNS}."
        )
    if code == Exit.FAILED:
        return (
            f"REGRESSION at {beyond} (run {p['run_id'][:8]}): {metric} "
            f"{p['direction']} {pct_text(p['delta_pct'])}."
        )
    if p is not None:
        return (
            f"No regression: {beyond} (run {p['run_id'][:8]}) is an improvement, "
            f"{pct_text(p['delta_pct'])}."
        )
    if result["change_points"]:
        return f"No regression: every change point is within the {threshold_pct:g}% threshold."
    return "No change point: no regression."
