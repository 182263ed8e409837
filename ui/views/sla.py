"""SLA: judge claims ("p99 TTFT < 800 ms at level 2") against a stored run. Upload or paste a
claims TOML; the verdict `peakload sla` gives (its exit code and why), then each claim (at each
load of a sweep), the load delivered and the error budget: pass, fail or insufficient samples,
with its statistics."""

from __future__ import annotations

import streamlit as st

from analysis.verdicts.sla import CLAIM_METRICS
from loadgen.errors import SpecError
from ui.data import shared
from ui.data import sla as sla_data
from ui.views.common import csv_download, fmt, pick_run, verdict_alert

EXAMPLE = """confidence = 0.99

[[claims]]
metric = "ttft_ms"
percentile = 90
threshold = 500

[[claims]]
metric = "e2e_ms"
percentile = 99
threshold = 2000
"""

st.title("SLA verdicts")
run_id = pick_run()
if run_id is None:
    st.stop()

uploaded = st.file_uploader("Claims file (TOML)", type=["toml"], key="sla_upload")
if uploaded is not None:
    claims_text, where = uploaded.getvalue().decode("utf-8", errors="replace"), uploaded.name
else:
    claims_text = st.text_area("…or write the claims here", EXAMPLE, height=260, key="sla_text")
    where = "claims (text box)"

try:
    judgement = sla_data.judged(run_id, claims_text, where)
except SpecError as exc:
    st.error(f"The claims are not valid: {exc}")
    st.stop()

run = shared.run(run_id)
if not run.get("requests"):
    st.warning(
        "This run has no requests: no claim can be decided (each lacks samples). It ended "
        f"**{run.get('status')}**."
    )
if run.get("valid") is False:
    st.warning(
        "This run is flagged INVALID: its verdicts describe the generator as much as the "
        "server. See the Run page for why."
    )

verdicts = sla_data.criteria_frame(judgement)
verdict_alert(judgement)
if judgement.get("loads", 1) > 1:
    st.caption(
        f"Each claim that names no level is judged at each of the run's {judgement['loads']} "
        "loads (a pass needs every load); the error budget over all its steady requests; a "
        "fail must survive Holm over every test of the verdict."
    )

WORDS = {"pass": "PASS", "fail": "FAIL", "insufficient samples": "INSUFFICIENT SAMPLES"}
for v in verdicts.to_dict("records"):
    if v["metric"] not in CLAIM_METRICS:  # the error budget, the load delivered
        text = f"**{WORDS[v['verdict']]}** — {v['claim']}: {v['exceedances']} of {v['n']}."
    else:
        tokens = v.get("tokens")
        of = (
            f"{v['n']} samples"
            if tokens is None or tokens != tokens  # NaN in a frame of mixed claims
            else f"{int(tokens)} tokens from {v['n']} requests (the request is the unit)"
        )
        text = (
            f"**{WORDS[v['verdict']]}** — {v['claim']}: observed p{v['percentile']:g} = "
            f"{fmt(v['observed'], 2, 'ms')}; {v['exceedances']} of {of} at or above "
            f"{v['threshold']:g} ms (allowed {100 * v['allowed']:.3g}%); exceedance fraction "
            f"in [{100 * v['exceed_lower']:.3g}%, {100 * v['exceed_upper']:.3g}%] at "
            f"{100 * v['confidence']:g}% confidence."
        )
        if v["verdict"] != "pass":
            text += f" Passing needs at least {v['samples_needed']} " + (
                "samples." if of.endswith("samples") else "requests."
            )
    if v["verdict"] == "pass":
        st.success(text)
    elif v["verdict"] == "fail":
        st.error(text)
    else:
        st.warning(text)

st.dataframe(verdicts, hide_index=True)
st.caption(
    "Exact binomial test on exceedances from raw rows (steady phase); a token-level claim "
    "(itl_ms) takes the request as the unit (loadgen/results/clustered.py); failed requests count "
    'as exceedances unless a claim says `failures = "exclude"`.'
)
csv_download(verdicts, "verdicts")
