"""What a stored run cost and what a million tokens cost at each level's measured throughput,
from the prices stored with its spec (`[cost]`, loadgen.runspec.cost), and the break-even between
the self-hosted price and per-token billing. USD; tokens as billed (the server's usage when it
reported one, else the client's count), of requests the server answered with 200.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from loadgen.runspec.cost import (
    CostSpec,
    audio_cost_usd,
    blended_per_mtok_output,
    break_even_output_tok_s,
    hosted_cost_usd,
    per_audio_hour_at,
    per_mtok_at,
    token_cost_usd,
)


def cost_spec(run: Mapping[str, Any]) -> CostSpec:
    """The run's stored `[cost]` (an empty one for runs stored before prices existed)."""
    spec = run.get("spec") or {}
    raw = spec.get("cost") if isinstance(spec, Mapping) else None
    return CostSpec.model_validate(raw or {})


def cost_basis(cost: CostSpec) -> str | None:
    """How the run is priced: "self-hosted" (an hourly price), "per-token", "per-audio-hour",
    or None when no price is known (then no level has a cost figure)."""
    if cost.hourly_usd is not None:
        return "self-hosted"
    if cost.per_token:
        return "per-token"
    return "per-audio-hour" if cost.audio_per_hour is not None else None


def billed_tokens(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per request (input, output) tokens as billed: usage when reported, else the client's
    count; zero for requests the server did not answer with 200 (a 429 is not billed)."""
    if df.empty:
        z = np.zeros(0)
        return z, z
    answered = (pd.to_numeric(df["http_status"], errors="coerce") == 200).to_numpy()
    inp = pd.to_numeric(df["usage_prompt_tokens"], errors="coerce").fillna(
        pd.to_numeric(df["prompt_tokens"], errors="coerce")
    )
    out = pd.to_numeric(df["usage_completion_tokens"], errors="coerce").fillna(
        pd.to_numeric(df["output_tokens"], errors="coerce")
    )
    return (
        np.where(answered, inp.fillna(0).to_numpy(dtype=float), 0.0),
        np.where(answered, out.fillna(0).to_numpy(dtype=float), 0.0),
    )


def run_cost(
    run: Mapping[str, Any], df: pd.DataFrame, levels: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The run's cost block: basis ("self-hosted", "per-token" or None when no price is
    known), total, tokens billed, per level the cost per million output and input tokens at
    its measured throughput, and the break-even when both prices are known.

    Self-hosted: the run cost hourly x its wall duration; at a level delivering T output
    tokens/s the deployment costs hourly / (T x 3600) x 1e6 per million output tokens (and
    likewise per million input tokens at the level's input tokens/s, each charged the whole
    price). Per-token: the listed prices, and per million output tokens with this load's
    input attached (output + input x in/out). Break-even: the output tokens/s, averaged over
    the hours paid, at which both cost the same (loadgen.runspec.cost.break_even_output_tok_s)."""
    cost = cost_spec(run)
    inp, out = billed_tokens(df)
    tin, tout = float(inp.sum()), float(out.sum())
    duration = run.get("duration_s")
    seconds = float(duration) if duration is not None and np.isfinite(duration) else None
    basis = cost_basis(cost)
    total = (
        hosted_cost_usd(seconds, cost)
        if basis == "self-hosted" and seconds is not None
        else token_cost_usd(tin, tout, cost)
        if basis == "per-token"
        else audio_cost_usd(billed_audio_s(df).sum(), cost)
        if basis == "per-audio-hour"
        else None
    )
    level_col = df["level"].to_numpy() if len(df) else np.zeros(0)
    steady = (df["phase"] == "steady").to_numpy() if len(df) else np.zeros(0, dtype=bool)
    per_level = []
    for lv in levels:
        rows = (level_col == int(lv["level"])) & steady
        lin, lout = float(inp[rows].sum()), float(out[rows].sum())
        out_tps = lv.get("output_tokens_per_s")
        out_tps = float(out_tps) if out_tps is not None else float("nan")
        # the level's input rate: its output rate scaled by the steady requests' in/out ratio
        in_tps = out_tps * lin / lout if lout > 0 else float("nan")
        entry: dict[str, Any] = {
            "level": int(lv["level"]),
            "input_tokens": lin,
            "output_tokens": lout,
            "output_tokens_per_s": out_tps,
            "input_tokens_per_s": in_tps,
        }
        if basis == "self-hosted":
            entry["usd_per_mtok_output"] = per_mtok_at(out_tps, cost)
            entry["usd_per_mtok_input"] = per_mtok_at(in_tps, cost)
        elif basis == "per-token":
            entry["usd_per_mtok_output"] = cost.output_per_mtok
            entry["usd_per_mtok_input"] = cost.input_per_mtok
        entry["per_token_usd_per_mtok_output"] = blended_per_mtok_output(lin, lout, cost)
        entry["per_token_usd"] = token_cost_usd(lin, lout, cost)
        per_level.append(entry)
    block: dict[str, Any] = {
        "basis": basis,
        "total_usd": total,
        "duration_s": seconds,
        "input_tokens": tin,
        "output_tokens": tout,
        "usd_per_mtok_output_run": total / tout * 1e6 if total is not None and tout > 0 else None,
        "prices": {
            "input_per_mtok": cost.input_per_mtok,
            "output_per_mtok": cost.output_per_mtok,
            "as_of": cost.as_of.isoformat() if cost.as_of else None,
            "source": cost.source or None,
            "gpu_hourly_usd": cost.gpu_hourly_usd,
            "gpus": cost.gpus if cost.gpu_hourly_usd is not None else None,
        },
        "levels": per_level,
        "break_even": _break_even(cost, per_level, tin, tout),
    }
    block["prices"]["audio_per_hour"] = cost.audio_per_hour
    block["audio"] = audio_cost(cost, df, levels)
    return block


def billed_audio_s(df: pd.DataFrame) -> np.ndarray:
    """Per request the audio seconds billed (its `audio_ms`, deploy/sql/0210) when the server
    answered with 200; zero otherwise and for requests without audio."""
    if df.empty or "audio_ms" not in df.columns:
        return np.zeros(len(df))
    answered = (pd.to_numeric(df["http_status"], errors="coerce") == 200).to_numpy()
    ms = pd.to_numeric(df["audio_ms"], errors="coerce").fillna(0).to_numpy(dtype=float)
    return np.where(answered, ms / 1000.0, 0.0)


def audio_cost(
    cost: CostSpec, df: pd.DataFrame, levels: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """A speech run's cost per hour of audio (None for a run without audio): the price per
    audio hour when billed so, and per level, self-hosted, hourly / the level's audio seconds
    per wall second (analysis.reports.summary_audio's `audio_s_per_s`)."""
    audio_s = billed_audio_s(df)
    if not audio_s.any():
        return None
    per_level = []
    for lv in levels:
        rate = (lv.get("audio") or {}).get("audio_s_per_s")
        hosted = per_audio_hour_at(float(rate), cost) if rate is not None else None
        usd = hosted if hosted is not None else cost.audio_per_hour
        per_level.append(
            {"level": int(lv["level"]), "audio_s_per_s": rate, "usd_per_audio_hour": usd}
        )
    return {
        "audio_hours": float(audio_s.sum()) / 3600.0,
        "billed_usd": audio_cost_usd(float(audio_s.sum()), cost),
        "audio_per_hour": cost.audio_per_hour,
        "levels": per_level,
    }


def _break_even(
    cost: CostSpec, levels: Sequence[Mapping[str, Any]], tin: float, tout: float
) -> dict[str, Any] | None:
    """At the best measured level: its output tokens/s, the break-even output tokens/s, and
    the share of the hours paid the deployment must run at that level to break even."""
    be = break_even_output_tok_s(tin, tout, cost)
    rates = [
        float(lv["output_tokens_per_s"])
        for lv in levels
        if lv.get("output_tokens_per_s") is not None and np.isfinite(lv["output_tokens_per_s"])
    ]
    if be is None or not rates:
        return None
    best = max(rates)
    share = be / best if best > 0 else None
    if share is None:
        verdict = "no throughput measured"
    elif share <= 1.0:
        verdict = (
            f"self-hosted is cheaper when the load averages over {be:,.0f} output tokens/s "
            f"({share:.0%} of the best measured {best:,.0f}/s, sustained); below it, per-token"
        )
    else:
        verdict = (
            f"per-token is cheaper at any load this deployment sustains: breaking even needs "
            f"{be:,.0f} output tokens/s, {share:.1f}x the best measured {best:,.0f}/s"
        )
    return {
        "output_tokens_per_s": be,
        "best_measured_output_tokens_per_s": best,
        "utilisation_needed": share,
        "sentence": verdict,
    }


def level_rates(
    run: Mapping[str, Any], df: pd.DataFrame, levels: pd.DataFrame
) -> list[dict[str, Any]]:
    """Per stored level its output tokens/s, by the summary's one definition (tokens that
    arrived inside the level's steady window; analysis.reports.summary.level_summary)."""
    from analysis.reports.summary import level_summary

    return [
        {"level": lv["level"], "output_tokens_per_s": lv.get("output_tokens_per_s")}
        for lv in level_summary(df, levels, run)["levels"]
    ]


def cost_change(
    b_run: Mapping[str, Any],
    c_run: Mapping[str, Any],
    b_df: pd.DataFrame,
    c_df: pd.DataFrame,
    b_levels: pd.DataFrame,
    c_levels: pd.DataFrame,
) -> dict[str, Any]:
    """The cost side of `compare`: each run's total and basis, and per load both runs ran
    (levels paired as analysis.verdicts.regression pairs them) USD per million output tokens at each
    side's measured throughput, with the relative change. Informational: never a verdict."""
    from analysis.verdicts.regression import pair_levels  # scipy.stats: only for compare

    b = run_cost(b_run, b_df, level_rates(b_run, b_df, b_levels))
    c = run_cost(c_run, c_df, level_rates(c_run, c_df, c_levels))
    b_by = {lv["level"]: lv for lv in b["levels"]}
    c_by = {lv["level"]: lv for lv in c["levels"]}
    pairs, _ = pair_levels(b_levels, c_levels)
    rows = []
    for bl, cl, load_label in pairs:
        bv = b_by.get(bl, {}).get("usd_per_mtok_output")
        cv = c_by.get(cl, {}).get("usd_per_mtok_output")
        rows.append(
            {
                "load": load_label,
                "baseline_usd_per_mtok_output": bv,
                "candidate_usd_per_mtok_output": cv,
                "change_pct": (cv - bv) / bv * 100 if bv and cv is not None else None,
            }
        )
    return {
        "baseline": {"basis": b["basis"], "total_usd": b["total_usd"], "prices": b["prices"]},
        "candidate": {"basis": c["basis"], "total_usd": c["total_usd"], "prices": c["prices"]},
        "levels": rows,
    }
