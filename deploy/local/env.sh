#!/usr/bin/env bash
# Start (or reuse) the local services and print the environment the tests read, e.g.
#   eval "$(sudo deploy/local/env.sh)"
# Lines: PEAKLOAD_TEST_TIMESCALE_URL, PEAKLOAD_TEST_REDIS_URL, and llama.sh's
# PEAKLOAD_TEST_LLAMA_SERVER and PEAKLOAD_TEST_LLAMA_MODEL (a real engine, built once and
# cached). The URL holds the local test password: print it only into your own shell, never
# into a log.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ts=$("$HERE/timescaledb.sh") || { echo "env.sh: timescaledb.sh failed" >&2; exit 1; }
redis=$("$HERE/redis.sh") || { echo "env.sh: redis.sh failed" >&2; exit 1; }
llama=$("$HERE/llama.sh") || { echo "env.sh: llama.sh failed" >&2; exit 1; }
printf "export PEAKLOAD_TEST_TIMESCALE_URL='%s'\n" "$ts"
printf "export PEAKLOAD_TEST_REDIS_URL='%s'\n" "$redis"
printf '%s\n' "$llama"
