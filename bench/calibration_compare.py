"""Calibration of `compare` with more draws than tests/analysis/test_compare_calibration.py (issue
#21): A/A false-regression rates (the family of analysis.verdicts.compare under Holm, and the old
per-token method), power of a 10 % p50 TTFT regression at 500 requests per side (whole family, and
`--primary ttft_ms:50`), and one vs K baseline runs under a between-run effect. Synthetic runs from
tests/support/correlated_runs; analysis only (numpy), no server. Prints one JSON object.

    PYTHONPATH=. python bench/calibration_compare.py [--scale 1.0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from typing import Any

import numpy as np

from analysis.verdicts import compare as cmp
from analysis.verdicts import family
from tests.support import compare_calibration as cc
from tests.support import correlated_runs as cr

ALPHA = 0.05


def rate(k: int, n: int) -> dict[str, Any]:
    return {
        "k": k,
        "n": n,
        "rate": k / n,
        "upper99": cc.binomial_upper(k, n),
        "lower99": cc.binomial_lower(k, n),
    }


def aa(
    model: cr.LevelModel, pairs: int, threshold: float, old_pairs: int, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    new = old = 0
    kw: dict[str, Any] = {"threshold_pct": threshold, "confidence": 1 - ALPHA, "resamples": 300}
    for i in range(pairs):
        a, b = cc.side(cr.draw(model, rng)), cc.side(cr.draw(model, rng))
        new += any(r["regression"] for r in cc.new_rows(a, b, seed=i, **kw))
        if i < old_pairs:
            old += bool(cc.old_regressions(a, b, seed=i, **kw))
    return {
        "threshold_pct": threshold,
        "new": rate(new, pairs),
        "old_per_token": rate(old, old_pairs),
    }


def power(model: cr.LevelModel, draws: int, seed: int) -> dict[str, Any]:
    slower = dataclasses.replace(model, ttft_median=model.ttft_median * 1.1)
    rng = np.random.default_rng(seed)
    whole = primary = 0
    p = frozenset({("ttft_ms", 50.0)})
    for i in range(draws):
        a, b = cc.side(cr.draw(model, rng)), cc.side(cr.draw(slower, rng))
        rows = cc.new_rows(a, b, threshold_pct=5.0, confidence=1 - ALPHA, resamples=300, seed=i)
        hit = [r for r in rows if r["metric"] == "ttft_ms" and r["percentile"] == 50.0]
        whole += bool(hit[0]["regression"])
        family.decide(rows, 1 - ALPHA, p)
        primary += bool(hit[0]["regression"])
    return {"whole_family_12_tests": rate(whole, draws), "primary_ttft_p50": rate(primary, draws)}


def multi(model: cr.LevelModel, pairs: int, k: int, tau: float, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    single = several = 0
    kw: dict[str, Any] = {"threshold_pct": 0.0, "confidence": 1 - ALPHA, "resamples": 200}
    for i in range(pairs):
        runs = [cc.side(cr.draw(cc.run_effect(model, tau, rng), rng)) for _ in range(k + 1)]
        *bases, cand = runs
        single += any(r["regression"] for r in cc.new_rows(bases[-1], cand, seed=i, **kw))
        several += any(r["regression"] for r in cc.multi_rows(bases, cand, seed=i, **kw))
    return {
        "tau": tau,
        "k": k,
        "single_baseline": rate(single, pairs),
        "k_baselines": rate(several, pairs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every draw count")
    args = ap.parse_args()
    n = lambda x: max(10, int(x * args.scale))  # noqa: E731
    small = cr.LevelModel(requests=120, chunks=(10, 40))
    big = cr.LevelModel(requests=500, chunks=(20, 80))
    t0 = time.time()
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "alpha": ALPHA,
        "family": f"{len(cc.METRICS)} metrics x {len(cc.PERCENTILES)} percentiles, Holm",
        "min_requests": cmp.MIN_REQUESTS,
    }
    out["aa_120_requests_threshold_0"] = aa(small, n(1000), 0.0, n(300), 1)
    out["aa_120_requests_threshold_5"] = aa(small, n(1000), 5.0, n(300), 2)
    out["aa_500_requests_threshold_0"] = aa(big, n(200), 0.0, n(100), 3)
    out["power_500_requests_10pct_p50_ttft"] = power(big, n(300), 4)
    out["multi_run_k5_tau006"] = multi(dataclasses.replace(small, requests=80), n(300), 5, 0.06, 5)
    out["multi_run_k3_tau006"] = multi(dataclasses.replace(small, requests=80), n(300), 3, 0.06, 6)
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
