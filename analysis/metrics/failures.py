"""Failures and token counts: a failed request's kind, error rates, client-vs-server token
agreement."""

from __future__ import annotations

import numpy as np
import pandas as pd


def failure_kind(df: pd.DataFrame) -> pd.Series:
    """A failure's kind: `http_<status>` for HTTP errors, `timeout:<phase>`, `not_sent:<reason>`,
    `stream_error:schema` for answers that broke the requested structured output, else the
    outcome (`stream_error`, `cancelled`); `ok` for successes."""
    outcome = df["outcome"].astype(object).to_numpy()
    kind = outcome.copy()
    http = np.flatnonzero(outcome == "http_error")
    if http.size:
        status = df["http_status"].to_numpy(dtype=np.float64, na_value=np.nan)[http]
        kind[http] = [f"http_{int(x)}" if np.isfinite(x) else "http_unknown" for x in status]
    phase = df["error_phase"].astype(object).to_numpy()
    schema = (outcome == "stream_error") & (phase == "schema")
    timed = np.flatnonzero(
        ((outcome == "timeout") | (outcome == "not_sent") | schema) & pd.notna(phase)
    )
    if timed.size:
        kind[timed] = [
            f"{o}:{p}" if p else o for o, p in zip(outcome[timed], phase[timed], strict=True)
        ]
    return pd.Series(kind, index=df.index, dtype=object)


def error_rates(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per failure kind: count and rate = count / all requests in `df`."""
    n = len(df)
    kinds = failure_kind(df)
    counts = kinds[kinds != "ok"].value_counts().sort_index()
    return {str(k): {"count": int(c), "rate": c / n} for k, c in counts.items()}


TOKEN_AGREEMENT_COLUMNS = ("usage_completion_tokens", "client_tokens")
"""The request columns `token_agreement` reads."""


def token_agreement(df: pd.DataFrame) -> dict[str, float | int | None]:
    """Server usage vs client count, over requests with `usage_completion_tokens`: n, fraction
    exactly equal, mean and max |usage - client_tokens| and the mean relative difference
    (usage - client) / usage."""
    has = df["usage_completion_tokens"].notna()
    n = int(has.sum())
    if n == 0:
        return {
            "n": 0,
            "exact_fraction": None,
            "mean_abs_diff": None,
            "max_abs_diff": None,
            "mean_rel_diff": None,
        }
    usage = df.loc[has, "usage_completion_tokens"].to_numpy(dtype=np.float64)
    client = df.loc[has, "client_tokens"].to_numpy(dtype=np.float64)
    diff = usage - client
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(usage > 0, diff / usage, np.nan)
    return {
        "n": n,
        "exact_fraction": float(np.mean(diff == 0)),
        "mean_abs_diff": float(np.mean(np.abs(diff))),
        "max_abs_diff": float(np.max(np.abs(diff))),
        "mean_rel_diff": float(np.nanmean(rel)) if np.isfinite(rel).any() else None,
    }
