"""The highest load of a sweep that still meets the SLOs, bracketed by the next level up: each
level judged on its own by the exact binomial rule of analysis.verdicts.sla, a fail surviving
Holm over the level's claims (analysis.verdicts.fail_family) (the frontier's companion in a
report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from analysis import metrics as m
from analysis.verdicts import sla
from analysis.verdicts.fail_family import adjust_fails


def max_load_meeting_slos(
    df: pd.DataFrame,
    levels_df: pd.DataFrame,
    slos: Sequence[Mapping[str, Any]],
    *,
    confidence: float = sla.DEFAULT_CONFIDENCE,
    chunks: m.ChunkArrays | None = None,
) -> dict[str, Any]:
    """The highest configured load whose level passes every SLO (the exact binomial verdict of
    analysis.verdicts.sla at `confidence`), with its uncertainty: the next level up, and why it did
    not pass (fail or insufficient samples). Levels are ordered by configured value."""
    if not slos:
        return {"max_value": None, "level": None, "reason": "no SLOs", "levels": []}
    ch = chunks
    if ch is None and any(s["metric"] == "itl_ms" for s in slos):
        ch = m.ChunkArrays.from_frame(df)
    per_level = []
    for _, lv in levels_df.sort_values(["value", "level"]).iterrows():
        claims = [
            sla.Claim(
                metric=s["metric"],
                percentile=s["percentile"],
                threshold=s["threshold"],
                level=int(lv["level"]),
            )
            for s in slos
        ]
        # a level's fail survives Holm over its claims, as each load's in the exit verdict
        verdicts = adjust_fails(sla.evaluate(df, claims, confidence=confidence, chunks=ch))
        worst = (
            "fail"
            if any(v.verdict == "fail" for v in verdicts)
            else "insufficient samples"
            if any(v.verdict != "pass" for v in verdicts)
            else "pass"
        )
        per_level.append(
            {
                "level": int(lv["level"]),
                "value": float(lv["value"]),
                "verdict": worst,
                "claims": [v.to_json() for v in verdicts],
            }
        )
    best = None
    for i, entry in enumerate(per_level):
        if entry["verdict"] == "pass":
            best = i
        else:
            break  # loads above a level that does not pass are not claimed
    nxt = best + 1 if best is not None else 0
    above = per_level[nxt] if nxt < len(per_level) else None
    return {
        "max_value": per_level[best]["value"] if best is not None else None,
        "level": per_level[best]["level"] if best is not None else None,
        "next_value": above["value"] if above else None,
        "next_verdict": above["verdict"] if above else None,
        "confidence": confidence,
        "levels": per_level,
    }
