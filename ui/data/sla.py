"""The SLA page's data: a claims file parsed (analysis.verdicts.sla) and judged against one run."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analysis.verdicts import sla as asla
from analysis.verdicts.verdict import judge_claims
from ui.data import shared


def parse_claims(text: str, where: str) -> asla.ClaimsFile:
    """A claims TOML (analysis.verdicts.sla); SpecError names the file and the field."""
    import tomllib

    from loadgen.errors import SpecError

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=where) from None
    return asla.parse_claims(data, where=where)


def judged(run_id: str, claims_text: str, where: str) -> dict[str, Any]:
    """The claims judged against one run as `peakload sla` judges them
    (analysis.verdicts.verdict.judge_claims: each claim at each load of a sweep, the load
    delivered, the error budget, fails under Holm, the run's state first): its JSON, with the
    exit code, the reason and one entry per criterion."""
    return _judged(run_id, shared.version(run_id), claims_text, where)


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def _judged(run_id: str, version: str, claims_text: str, where: str) -> dict[str, Any]:
    claims = parse_claims(claims_text, where)
    arrays = shared.chunks(run_id)  # first: frame and arrays in one load
    run = shared.run(run_id)
    df = shared.requests(run_id)
    levels = shared.levels(run_id)
    return judge_claims(run, df, claims, chunks=arrays, levels=levels).to_json()


def criteria_frame(judgement: dict[str, Any]) -> pd.DataFrame:
    """One row per criterion of a judgement's JSON."""
    return pd.DataFrame(judgement["criteria"])
