"""SLA claims ("pXX of a latency metric is below T ms") and their verdicts from the exact
binomial distribution of exceedances, pooled from raw rows (the MLPerf LoadGen early-stopping
reasoning). Claims come from a TOML file validated with pydantic; errors name the file and field.

The test, for a claim "p`P` of `metric` < `T`" with allowed exceedance fraction e0 = 1 - P/100,
n samples and k exceedances (samples with value >= T: the claim is strict), at confidence C
(default 0.99):
- pass if  P(Binomial(n, e0) <= k) <= 1 - C: observing this few exceedances would be that
  unlikely if the true exceedance fraction were e0 (or more), i.e. the one-sided Clopper-Pearson
  upper bound on the exceedance fraction at level C is at most e0;
- fail if  P(Binomial(n, e0) >= k) <= 1 - C: the Clopper-Pearson lower bound is at least e0,
  clear evidence the claim is false;
- else "insufficient samples" (never "pass").
With k = 0, pass needs (1 - e0)^n <= 1 - C: 459 samples for p99 at 99% (0.99^458 > 0.01 >=
0.99^459); 44 for p90 at 99%; with k = 1, 662 samples for p99 at 99%.

That rule holds for per-request metrics (TTFT, TPOT, E2E: one independent sample a request). A
token-level claim (`itl_ms`: one sample a token, correlated within a request) is judged with the
request as the unit (loadgen/results/clustered.py): n is the number of requests, the tokens are
shown beside it, and passing needs at least as many requests as the same claim on a per-request
metric.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from analysis import metrics as m
from analysis.verdicts.clusters import TOKEN_METRICS, request_counts
from analysis.verdicts.exitcodes import Exit
from loadgen.errors import SpecError
from loadgen.results.binomial import Verdict as Verdict
from loadgen.results.binomial import decide as decide
from loadgen.results.binomial import fail_p_value as fail_p_value
from loadgen.results.binomial import pass_p_value as pass_p_value
from loadgen.results.clustered import RULE as CLUSTERED_RULE
from loadgen.results.clustered import decide_clustered
from loadgen.results.reasons import STOPPED_BY_PEAKLOAD
from loadgen.runspec.fields import DEFAULT_VERDICT_CONFIDENCE

DEFAULT_CONFIDENCE = DEFAULT_VERDICT_CONFIDENCE
CLAIM_METRICS = (
    "ttft_ms",
    "ttft_sched_ms",
    "ttfat_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "e2e_sched_ms",
    "ttfab_ms",  # speech: the time to the first audio byte (loadgen.results.audio_formulas)
    "audio_rtf",  # speech: processing time / audio length
)


class PromptRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)


class Claim(BaseModel):
    """One claim: `metric`'s `percentile`-th percentile is below `threshold` ms, optionally only
    for one level, one region, or a prompt_tokens range. `failures`: whether requests that were
    sent but failed count as exceedances ("exceed", the conservative default) or are left out;
    `unsent`: the same for requests demanded but never sent (`not_sent`, e.g. refused by
    `max_concurrency`). Requests peakload itself stopped (the user aborted the run, its time
    limit, its end: loadgen.results.reasons.STOPPED_BY_PEAKLOAD) never count; they are reported
    apart."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    metric: Literal[
        "ttft_ms",
        "ttft_sched_ms",
        "ttfat_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
        "e2e_sched_ms",
        "ttfab_ms",
        "audio_rtf",
    ]
    percentile: float = Field(gt=0, lt=100)
    threshold: float = Field(gt=0)
    confidence: float | None = Field(default=None, gt=0.5, lt=1)
    level: int | None = Field(default=None, ge=0)
    # on every steady request of a sweep's levels pooled (a whole-run claim), not at each load
    pooled: bool = False
    region: str | None = None
    prompt_tokens: PromptRange | None = None
    failures: Literal["exceed", "exclude"] = "exceed"
    unsent: Literal["exceed", "exclude"] = "exceed"
    name: str | None = None

    def label(self) -> str:
        cond = [
            f"level {self.level}" if self.level is not None else "",
            "all levels pooled" if self.pooled else "",
            f"region {self.region}" if self.region else "",
            _prompt_label(self.prompt_tokens),
        ]
        where = ", ".join(c for c in cond if c)
        base = f"p{self.percentile:g} {self.metric} < {self.threshold:g}"
        return self.name or (f"{base} ({where})" if where else base)


def _prompt_label(r: PromptRange | None) -> str:
    if r is None:
        return ""
    return f"prompt {r.min if r.min is not None else 0}..{r.max if r.max is not None else '∞'}"


class ClaimsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    confidence: float = Field(default=DEFAULT_CONFIDENCE, gt=0.5, lt=1)
    # the error budget judged beside the claims (analysis.verdicts.verdict); None: the run spec's
    # own
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _ranges(self) -> ClaimsFile:
        for i, c in enumerate(self.claims):
            if c.pooled and c.level is not None:
                raise ValueError(f"claims[{i}]: `pooled` and `level` exclude each other")
            r = c.prompt_tokens
            if r and r.min is not None and r.max is not None and r.max < r.min:
                raise ValueError(f"claims[{i}].prompt_tokens: max is below min")
        return self


def parse_claims(data: Mapping[str, Any], where: str = "claims") -> ClaimsFile:
    try:
        return ClaimsFile.model_validate(data)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            parts.append(f"{loc.lstrip('.') or '(top level)'}: {msg.removeprefix('Value error, ')}")
        raise SpecError("; ".join(parts), where=where) from None


def load_claims(path: str | Path) -> ClaimsFile:
    """Read and validate a claims TOML; SpecError names the file and the field."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {exc}", where=str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=str(p)) from None
    return parse_claims(data, where=str(p))


# ---------------------------------------------------------------- statistics
# pass_p_value, fail_p_value and decide live in loadgen/results/binomial.py: the saturation search
# in the runner decides its levels with the same rule.


def clopper_pearson(n: int, k: int, confidence: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper), each at `confidence`, on the exceedance
    fraction after k exceedances in n samples."""
    if n == 0:
        return 0.0, 1.0
    from loadgen.results.distributions import beta_ppf  # a report without claims never needs it

    lower = 0.0 if k == 0 else beta_ppf(1 - confidence, k, n - k + 1)
    upper = 1.0 if k == n else beta_ppf(confidence, k + 1, n - k)
    return lower, upper


def min_samples_to_pass(percentile: float, confidence: float, exceedances: int = 0) -> int:
    """The smallest n with P(Binomial(n, 1 - percentile/100) <= exceedances) <= 1 - confidence."""
    from loadgen.results.distributions import binom_cdf

    allowed = 1.0 - percentile / 100.0
    alpha = 1.0 - confidence
    if exceedances == 0:  # closed form, exact in floating point up to rounding at the boundary
        n = max(1, math.ceil(math.log(alpha) / math.log1p(-allowed)) - 1)
        while binom_cdf(0, n, allowed) > alpha:
            n += 1
        return n
    lo, hi = exceedances + 1, exceedances + 1
    while binom_cdf(exceedances, hi, allowed) > alpha:
        lo, hi = hi, hi * 2
    while lo < hi:  # the cdf falls as n grows
        mid = (lo + hi) // 2
        if binom_cdf(exceedances, mid, allowed) <= alpha:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    claim: str
    metric: str
    percentile: float
    threshold: float
    confidence: float
    verdict: Verdict
    n: int  # requests: the unit of every claim (a token-level claim's tokens are `tokens`)
    exceedances: int  # samples at or above the threshold (tokens, for a token-level claim)
    observed: float | None  # the pooled percentile of the samples (ms), numpy linear
    exceed_lower: float  # Clopper-Pearson bounds on the exceedance fraction
    exceed_upper: float
    allowed: float  # 1 - percentile/100
    p_pass: float
    p_fail: float
    samples_needed: int  # to pass with the observed exceedances (token-level: requests, at least)
    stopped: int = 0  # requests peakload itself stopped: reported apart, never counted
    tokens: int | None = None  # a token-level claim's samples (its n is the requests)
    rule: str = "exact binomial"
    # Holm over the run's fail-side tests (analysis.verdicts.fail_family): this test's adjusted
    # fail p-value on its own alpha's scale, and how many tests the family counts
    p_fail_adjusted: float | None = None
    family: int | None = None
    fail_held: bool = False  # disproved at its own confidence, not under Holm: not a fail

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()
        }


def claim_samples(
    df: pd.DataFrame, claim: Claim, chunks: m.ChunkArrays | None = None
) -> tuple[np.ndarray, int]:
    """The claim's samples (ms) from steady-phase ok requests matching its conditions, and the
    number of requests demanded and not served counted as extra exceedances: sent but failed
    (`failures = "exceed"`) and never sent (`unsent = "exceed"`), leaving out those peakload
    itself stopped (`claim_stopped`). `itl_ms` gives one sample per token (see
    metrics.itl_per_token_ms); its verdict takes them by request (`evaluate`)."""
    sel, failed = _selected(df, claim)
    if claim.metric == "itl_ms":
        ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
        values = m.itl_per_token_ms(ch, sel)
    else:
        values = m.per_request_values(df, claim.metric)[sel]
    return values[np.isfinite(values)], failed


def _selected(df: pd.DataFrame, claim: Claim) -> tuple[np.ndarray, int]:
    """The claim's ok requests, and how many of its requests count as misses."""
    rows = _claim_rows(df, claim)
    ok = (df["outcome"] == "ok").to_numpy()
    sent = df["sent_ns"].notna().to_numpy()
    served = rows & ~ok & ~stopped_rows(df)
    failed = int((served & sent).sum()) if claim.failures == "exceed" else 0
    failed += int((served & ~sent).sum()) if claim.unsent == "exceed" else 0
    return rows & ok, failed


def stopped_rows(df: pd.DataFrame) -> np.ndarray:
    """Cancelled or not sent because peakload stopped
    (loadgen.results.reasons.STOPPED_BY_PEAKLOAD)."""
    out = df["outcome"].isin(("cancelled", "not_sent")).to_numpy(copy=True)
    rows = np.flatnonzero(out)  # few: error_phase (Python strings) is read for them alone
    out[rows] = df["error_phase"].iloc[rows].isin(tuple(STOPPED_BY_PEAKLOAD)).to_numpy()
    return out


def claim_stopped(df: pd.DataFrame, claim: Claim) -> int:
    """The claim's requests peakload itself stopped: never counted, reported apart."""
    return int((_claim_rows(df, claim) & stopped_rows(df)).sum())


def _claim_rows(df: pd.DataFrame, claim: Claim) -> np.ndarray:
    rows = (df["phase"] == "steady").to_numpy().copy()
    if claim.level is not None:
        rows &= (df["level"] == claim.level).to_numpy()
    if claim.region is not None:
        rows &= (df["region"] == claim.region).to_numpy()
    if claim.prompt_tokens is not None:
        pt = df["prompt_tokens"].to_numpy(dtype=float)
        if claim.prompt_tokens.min is not None:
            rows &= pt >= claim.prompt_tokens.min
        if claim.prompt_tokens.max is not None:
            rows &= pt <= claim.prompt_tokens.max
    return rows


def evaluate(
    df: pd.DataFrame,
    claims: ClaimsFile | Sequence[Claim],
    *,
    confidence: float | None = None,
    chunks: m.ChunkArrays | None = None,
) -> list[ClaimVerdict]:
    """A verdict per claim (see the module docstring for the test)."""
    items = claims.claims if isinstance(claims, ClaimsFile) else list(claims)
    default_c = confidence or (
        claims.confidence if isinstance(claims, ClaimsFile) else DEFAULT_CONFIDENCE
    )
    ch = chunks
    if ch is None and any(c.metric == "itl_ms" for c in items):
        ch = m.ChunkArrays.from_frame(df)
    out = []
    for c in items:
        conf = c.confidence or default_c
        if c.metric in TOKEN_METRICS:
            assert ch is not None
            out.append(_token_verdict(df, c, ch, conf))
            continue
        values, failed = claim_samples(df, c, ch)
        k = int((values >= c.threshold).sum()) + failed
        observed = m.percentile(values, c.percentile) if values.size else float("nan")
        out.append(
            binomial_verdict(
                c,
                n=int(values.size) + failed,
                k=k,
                confidence=conf,
                observed=float(observed) if np.isfinite(observed) else None,
                stopped=claim_stopped(df, c),
            )
        )
    return out


def binomial_verdict(
    c: Claim, *, n: int, k: int, confidence: float, observed: float | None, stopped: int = 0
) -> ClaimVerdict:
    """A per-request claim's verdict after `k` exceedances in `n` samples (the module
    docstring's rule); `observed`: the samples' percentile, for the table."""
    allowed = 1.0 - c.percentile / 100.0
    lo, hi = clopper_pearson(n, k, confidence)
    return ClaimVerdict(
        claim=c.label(),
        metric=c.metric,
        percentile=c.percentile,
        threshold=c.threshold,
        confidence=confidence,
        verdict=decide(n, k, c.percentile, confidence),
        n=n,
        exceedances=k,
        observed=observed,
        exceed_lower=lo,
        exceed_upper=hi,
        allowed=allowed,
        p_pass=pass_p_value(n, k, allowed),
        p_fail=fail_p_value(n, k, allowed),
        samples_needed=min_samples_to_pass(c.percentile, confidence, k),
        stopped=stopped,
    )


def _token_verdict(df: pd.DataFrame, c: Claim, chunks: m.ChunkArrays, conf: float) -> ClaimVerdict:
    """A token-level claim, the request as the unit (loadgen/results/clustered.py)."""
    sel, failed = _selected(df, c)
    counts, hits, values = request_counts(chunks, sel, c.threshold, failed)
    d = decide_clustered(counts, hits, c.percentile, conf)
    observed = m.percentile(values, c.percentile) if values.size else float("nan")
    return ClaimVerdict(
        claim=c.label(),
        metric=c.metric,
        percentile=c.percentile,
        threshold=c.threshold,
        confidence=conf,
        verdict=d.verdict,
        n=d.requests,
        exceedances=d.exceedances,
        observed=float(observed) if np.isfinite(observed) else None,
        exceed_lower=d.lower,
        exceed_upper=d.upper,
        allowed=1.0 - c.percentile / 100.0,
        p_pass=d.p_pass,
        p_fail=d.p_fail,
        samples_needed=d.min_requests,
        stopped=claim_stopped(df, c),
        tokens=d.tokens,
        rule=CLUSTERED_RULE,
    )


def exit_code(verdicts: Sequence[ClaimVerdict]) -> Exit:
    """FAILED if any claim fails (a disproved claim dominates), else UNDECIDABLE if any has
    insufficient samples, else PASSED (analysis.verdicts.exitcodes)."""
    if any(v.verdict == "fail" for v in verdicts):
        return Exit.FAILED
    if any(v.verdict == "insufficient samples" for v in verdicts):
        return Exit.UNDECIDABLE
    return Exit.PASSED
