#!/usr/bin/env bash
# Every benchmark once, as bench/RESULTS.md records them (`make bench` runs this with the
# test services up and PEAKLOAD_TEST_TIMESCALE_URL set). Run on a quiet machine: the numbers
# are only worth quoting when nothing else competes for the two cores. Raw output goes to
# bench/out/; copy the tables into RESULTS.md with the date, `nproc` and the CPU model.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p bench/out
stamp=$(date -u +%Y%m%dT%H%M%SZ)
log=bench/out/run_all-$stamp.log
{
  echo "date: $(date -u)  nproc: $(nproc)  cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$log"
run() { echo "== $*" | tee -a "$log"; "$@" 2>&1 | tee -a "$log"; }
run $PY bench/sim_capacity.py --streams 260 --itl-ms 10 --duration 8
run $PY bench/transport_overhead.py --streams 1,256 --duration 8
run $PY bench/generator_accuracy.py --levels 1,16,64,256,1024 --duration 8
run $PY bench/validity_edge.py --streams 256 --runs 12 --hogs 1
run $PY bench/ingest.py --minutes "${PEAKLOAD_BENCH_INGEST_MINUTES:-10}"
run $PY bench/distributed.py
run $PY bench/timer_lateness.py --rate 6 --count 120 --rounds 3
run $PY bench/dispatch_delay.py --rate 6 --duration 20 --rounds 2
run $PY bench/analysis_load.py --parallel 2 --summary
run $PY bench/ui_render.py
echo "all benchmarks done: $log"
