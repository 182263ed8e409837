"""Launch: build a run spec with the form (or upload one), see and edit its TOML, download it,
check it with the spec loader and the operator's target policy (`PEAKLOAD_ALLOW_PRIVATE_TARGETS`,
`PEAKLOAD_TARGET_ALLOWLIST`), probe the target, then start the run (here, or on the workers)."""

from __future__ import annotations

import hashlib

import streamlit as st

from loadgen.errors import PeakloadError, PolicyError, SpecError
from ui import launch, spec_form
from ui.data import shared
from ui.login import current_visitor
from ui.views import spec_widgets
from ui.views.common import RUN_PARAM

visitor = current_visitor()
if not visitor.may_launch:  # not in a viewer's navigation either (ui/app.py)
    st.error("Launching runs needs the runner role.")
    st.stop()
st.title("Launch a run")
st.caption(
    f"Mode: **{launch.mode()}**. Targets must pass the operator's policy: public addresses "
    "only, unless private ones are allowed or allowlisted on this server."
)

source = st.radio("Spec from", ["the form", "a TOML file"], horizontal=True, key="launch_source")
if source == "the form":
    try:
        generated = spec_form.to_toml(spec_widgets.form_values())
    except SpecError as exc:
        st.error(str(exc))
        st.stop()
else:
    uploaded = st.file_uploader("Run spec (TOML)", type=["toml"], key="launch_upload")
    if uploaded is None:
        st.stop()
    generated = uploaded.getvalue().decode("utf-8", errors="replace")
# the text box follows the form until the form changes again; edits in between are kept
if st.session_state.get("launch_generated") != generated:
    st.session_state["launch_generated"] = generated
    st.session_state["launch_text"] = generated

st.subheader("The spec")
text = st.text_area(
    "TOML (editable: this text is what is checked, probed and run)", height=360, key="launch_text"
)
st.download_button(
    "Download spec.toml",
    data=text,
    file_name="spec.toml",
    mime="application/toml",
    on_click="ignore",
    key="launch_download",
    icon=":material/download:",
)
digest = hashlib.sha256(text.encode()).hexdigest()
try:
    spec = launch.parse_spec(text, "spec")
    launch.check_policy(spec)
except SpecError as exc:
    st.error(f"The spec is not valid ({len(exc.problems)} problem(s)):")
    for problem in exc.problems:
        st.error(problem)
    st.stop()
except PolicyError as exc:
    st.error(f"Refused by the target policy: {exc}")
    st.stop()
except PeakloadError as exc:
    st.error(str(exc))
    st.stop()
st.success(f"Spec **{spec.name}** is valid and its target {spec.target.base_url} is allowed.")

st.subheader("Probe, then start")
if st.button("Probe the target", key="launch_probe"):
    with st.spinner("Probing what the target does with each parameter…"):
        try:
            st.session_state["launch_probed"] = (digest, launch.probe(spec), None)
        except PeakloadError as exc:
            st.session_state["launch_probed"] = (digest, None, str(exc))
probed = st.session_state.get("launch_probed")
ready = False
if probed is None or probed[0] != digest:
    st.info("Probe the target to see what it does with what this spec sends; then Start.")
elif probed[2] is not None:
    st.error(f"The probe failed: {probed[2]}")
else:
    result = probed[1]
    st.dataframe(launch.probe_table(result), hide_index=True)
    if bad := launch.rejected(result):
        st.error(f"The target rejects {', '.join(bad)}: every request would fail. Edit the spec.")
    else:
        st.success(f"Probe: nothing rejected ({len(result.verdicts)} parameter(s) checked).")
        ready = True

if st.button("Start run", type="primary", key="launch_start", disabled=not ready):
    with st.spinner("Checking the target and starting…"):
        try:
            started = launch.launch(spec, shared.store_url(), launched_by=visitor.name)
        except PeakloadError as exc:
            st.error(str(exc))
            st.stop()
    st.session_state["launched"] = started

launched = st.session_state.get("launched")
if isinstance(launched, launch.Launched):
    started = launched
    if started.error:
        st.error(f"The run did not start: {started.error}")
    if started.run_id:
        st.write(f"Run **{started.run_id}** ({started.mode}).")
        link = {RUN_PARAM: started.run_id}
        st.page_link("views/live.py", label="Watch it live", query_params=link)
        st.page_link("views/run.py", label="Open its results", query_params=link)
