"""The Streamlit app: the login gate, then navigation between the pages in ui/views/.
Run it with `peakload ui` (or `streamlit run ui/app.py`); it reads the store named by
`PEAKLOAD_DATABASE_URL`, else the embedded default.
"""

from __future__ import annotations

import streamlit as st

from ui import auth

st.set_page_config(page_title="peakload", page_icon=":material/speed:", layout="wide")

authenticated = auth.gate()  # the login form until then; nothing of the store is read
PAGES = [
    st.Page(
        "views/runs.py", title="Runs", icon=":material/table_view:", url_path="runs", default=True
    ),
    st.Page("views/run.py", title="Run", icon=":material/monitoring:", url_path="run"),
    st.Page(
        "views/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"
    ),
    st.Page("views/sla.py", title="SLA", icon=":material/verified:", url_path="sla"),
    st.Page("views/nightly.py", title="Nightly", icon=":material/bedtime:", url_path="nightly"),
    st.Page("views/live.py", title="Live", icon=":material/sensors:", url_path="live"),
    st.Page("views/launch.py", title="Launch", icon=":material/rocket_launch:", url_path="launch"),
]

# navigation resolves the requested page (kept in the URL through the login) but shows and runs
# it only once the visitor is authenticated
page = st.navigation(PAGES, position="sidebar" if authenticated else "hidden")
if authenticated:
    page.run()
