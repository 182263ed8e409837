"""The Streamlit app: the login gate, then navigation between the pages in ui/views/ that the
visitor's role may see (a viewer has no Launch page; only an admin has Users). Run it with
`peakload ui` (or `streamlit run ui/app.py`); it reads the store named by
`PEAKLOAD_DATABASE_URL`, else the embedded default.
"""

from __future__ import annotations

import streamlit as st

from ui import login

st.set_page_config(page_title="peakload", page_icon=":material/speed:", layout="wide")

visitor = login.gate()  # the sign-in until then; nothing of the store is shown
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
]
# before the login every page is known (a runner's bookmark of /launch survives the sign-in);
# after it, only the visitor's role's
if visitor is None or visitor.may_launch:
    PAGES.append(
        st.Page(
            "views/launch.py", title="Launch", icon=":material/rocket_launch:", url_path="launch"
        )
    )
if visitor is None or visitor.may_manage_users:
    PAGES.append(
        st.Page("views/users.py", title="Users", icon=":material/group:", url_path="users")
    )

# navigation resolves the requested page (kept in the URL through the login) but shows and runs
# it only once the visitor is authenticated
page = st.navigation(PAGES, position="sidebar" if visitor is not None else "hidden")
if visitor is not None:
    st.session_state[login.VISITOR_KEY] = visitor  # what the pages read: login.current_visitor
    page.run()
