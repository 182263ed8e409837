"""Reading the store (schema: deploy/sql/, its shape: loadgen/results/storeformat.py): runs, levels,
shards, requests and ticks into pandas and flat arrays, the fast binary readers and the local
cache of ended runs."""
