"""The SLA page's data: a claims file parsed (analysis.verdicts.sla) and judged against one run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.verdicts import sla as asla
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


def verdicts(run_id: str, claims_text: str, where: str) -> pd.DataFrame:
    """analysis.verdicts.sla.evaluate of the claims against one run's requests, one row per
    claim."""
    return _verdicts(run_id, shared.version(run_id), claims_text, where)


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def _verdicts(run_id: str, version: str, claims_text: str, where: str) -> pd.DataFrame:
    claims = parse_claims(claims_text, where)
    arrays = shared.chunks(run_id)  # first: frame and arrays in one load
    out = asla.evaluate(shared.requests(run_id), claims, chunks=arrays)
    return pd.DataFrame([v.to_json() for v in out])
