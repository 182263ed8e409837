"""What a run shows: the per-level summary and its terminal table, the report as data, its HTML
and PNG renderings, and exports of the requests."""
