"""The Streamlit pages' data access, one module per page of ui/views/ (runs, run, compare, sla,
nightly, live) over `shared` (the store connection, the runs list, a run's cached raw frames);
`derive` adapts analysis results to display frames, with no store. Imports run one way:
page module -> shared -> analysis. The Launch page and the shared widgets (views/common.py)
read only `shared`. Times shown are UTC; latencies ms; rates per second over the steady window.
"""
