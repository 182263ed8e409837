"""SLA calibration with more draws than the test (issue #21): the false-pass rate at a claim's
boundary (true percentile = threshold) of the rule `peakload sla` uses, and of the per-token
binomial rule used before, on synthetic runs with correlation within requests
(tests/support/correlated_runs.py, tests/support/sla_calibration.py). Analysis only (numpy).

    .venv/bin/python bench/calibration_sla.py --draws 2000

Then whole runs' verdicts (claims at each load of a sweep, fails under Holm over the run's
tests: analysis/verdicts/loads.py, analysis/verdicts/fail_family.py), beside the rules used
before (each test at its own alpha; the loads pooled).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy import stats

from tests.support import sla_calibration as sc


def _ci(k: int, n: int) -> str:
    lo = 0.0 if k == 0 else float(stats.beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))
    return f"{k / n:.4f} [{lo:.4f}, {hi:.4f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"python {platform.python_version()}, draws {a.draws}, seed {a.seed}")  # fmt: skip
    print("| metric | case | claim | requests/run | tokens/run | alpha | new rule: false-pass "
          "[95% CI] | per-token rule: false-pass [95% CI] | 99.9% margin |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    settings = ((99.0, 0.99, 600), (90.0, 0.9, 100))
    for case in sc.CASES:
        for q, conf, n in settings:
            t = time.perf_counter()
            r = sc.itl_at_boundary(
                case, draws=a.draws, requests=n, percentile=q, confidence=conf, seed=a.seed
            )
            print(f"| itl_ms | {case} | p{q:g} @ {conf:.0%} | {n} | {r.mean_tokens:,.0f} | "
                  f"{r.alpha:.2f} | {_ci(r.passed, r.draws)} | "
                  f"{_ci(r.passed_per_token, r.draws)} | {r.margin()} / {r.draws} |",
                  flush=True)  # fmt: skip
            print(f"(that row: {time.perf_counter() - t:.0f} s)", file=sys.stderr)
    for q, conf, n in settings:
        r = sc.ttft_at_boundary(
            draws=a.draws, requests=n, percentile=q, confidence=conf, seed=a.seed
        )
        row = f"{_ci(r.passed, r.draws)} | (same rule) | {r.margin()} / {r.draws} |"
        print(f"| ttft_ms | lognormal | p{q:g} @ {conf:.0%} | {n} | — | {r.alpha:.2f} | {row}")
    _verdicts(a.draws, a.seed)


# (case, each load's true exceedance over the allowed one, requests a load)
VERDICT_CASES = (
    ("every claim at its boundary (A/A)", (1.0, 1.0, 1.0, 1.0), 600),
    ("every claim at its boundary (A/A)", (1.0, 1.0, 1.0, 1.0), 2000),
    ("top load at its boundary", (0.2, 0.2, 0.2, 1.0), 2000),
    ("every load within", (0.2, 0.2, 0.2, 0.2), 2000),
    ("top load 1.3x over", (0.2, 0.2, 0.2, 1.3), 2000),
    ("top load 2x over", (0.2, 0.2, 0.2, 2.0), 2000),
)


def _verdicts(draws: int, seed: int) -> None:
    """Whole runs: claims p50/p90/p99 at 99 % at 4 loads (12 tests), the exit verdict's rule
    (each claim at each load, fails under Holm) beside the rules used before."""
    print()
    print("| case | load exceedance / allowed | requests/load | tests | fail (Holm) [95% CI] | "
          "fail (each test at alpha) [95% CI] | pass (per load) [95% CI] | "
          "pass (loads pooled) [95% CI] | 99.9% margin |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for case, exceed, n in VERDICT_CASES:
        r = sc.verdict_over_loads(
            case, exceed=exceed, draws=draws, requests=n, confidence=0.99, seed=seed
        )
        print(f"| {case} | {', '.join(f'{x:g}' for x in exceed)} | {n} | {r.tests} | "
              f"{_ci(r.failed, r.draws)} | {_ci(r.failed_uncorrected, r.draws)} | "
              f"{_ci(r.passed, r.draws)} | {_ci(r.passed_pooled, r.draws)} | "
              f"{r.margin()} / {r.draws} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
