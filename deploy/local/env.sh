#!/usr/bin/env bash
# Start (or reuse) the local services and print the environment the tests read, e.g.
#   eval "$(sudo deploy/local/env.sh)"
# Lines: PEAKLOAD_TEST_TIMESCALE_URL and PEAKLOAD_TEST_REDIS_URL. The URL holds the local test
# password: print it only into your own shell, never into a log.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ts=$("$HERE/timescaledb.sh") || { echo "env.sh: timescaledb.sh failed" >&2; exit 1; }
redis=$("$HERE/redis.sh") || { echo "env.sh: redis.sh failed" >&2; exit 1; }
printf "export PEAKLOAD_TEST_TIMESCALE_URL='%s'\n" "$ts"
printf "export PEAKLOAD_TEST_REDIS_URL='%s'\n" "$redis"
