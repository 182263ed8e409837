"""Launch: start a run from a spec, only against targets the operator's policy allows
(`PEAKLOAD_ALLOW_PRIVATE_TARGETS`, `PEAKLOAD_TARGET_ALLOWLIST`)."""

from __future__ import annotations

import streamlit as st

from loadgen.errors import PeakloadError, PolicyError, SpecError
from ui import launch
from ui.data import shared
from ui.views.common import RUN_PARAM

EXAMPLE = """name = "my-endpoint-sweep"

[target]
api = "openai-chat"
base_url = "https://api.example.com/v1"
model = "my-model"
api_key_env = "MY_API_KEY"   # the key's environment variable; the key itself is never stored

[load]
concurrency = [1, 8, 32]
duration_s = 30
warmup_s = 5
"""

st.title("Launch a run")
st.caption(
    f"Mode: **{launch.mode()}**. Targets must pass the operator's policy: public addresses "
    "only, unless private ones are allowed or allowlisted on this server."
)

uploaded = st.file_uploader("Run spec (TOML)", type=["toml"], key="launch_upload")
if uploaded is not None:
    text, where = uploaded.getvalue().decode("utf-8", errors="replace"), uploaded.name
else:
    text = st.text_area("…or write the spec here", EXAMPLE, height=320, key="launch_text")
    where = "spec (text box)"

if text.strip() == EXAMPLE.strip():
    st.info("Edit the example (or upload a spec) to check it and start a run.")
    st.stop()
try:
    spec = launch.parse_spec(text, where)
    launch.check_policy(spec)
except SpecError as exc:
    st.error(f"The spec is not valid: {exc}")
    st.stop()
except PolicyError as exc:
    st.error(f"Refused by the target policy: {exc}")
    st.stop()
except PeakloadError as exc:
    st.error(str(exc))
    st.stop()

st.success(f"Spec **{spec.name}** is valid and its target {spec.target.base_url} is allowed.")
if st.button("Start run", type="primary", key="launch_start"):
    with st.spinner("Checking the target and starting…"):
        try:
            started = launch.launch(spec, shared.store_url())
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
