"""The Streamlit pages: one script per screen, run by ui/app.py's `st.navigation`, and their
shared widgets (common.py). Not named `pages/`: Streamlit treats a `pages/` folder beside the
main script as a v1 multipage app and runs the page scripts without ui/app.py, skipping its
login gate."""
