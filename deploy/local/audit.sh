#!/usr/bin/env bash
# The dependency audit `make check` runs: pip-audit over the virtualenv's installed packages
# (peakload itself, installed editable, is skipped). Without network it is skipped with one
# line saying so and that nothing was audited; it never reports a pass it did not make.
#   deploy/local/audit.sh PIP_AUDIT [PYTHON]
# AUDIT_REQUIRED=1 turns a skip into a failure (CI that must audit). AUDIT_PROBE_URL is what is
# tried first (https://pypi.org/pypi/pip/json: the service pip-audit asks).
set -uo pipefail
PIP_AUDIT=${1:?usage: audit.sh PIP_AUDIT [PYTHON]}
PYTHON=${2:-python3}
PROBE=${AUDIT_PROBE_URL:-https://pypi.org/pypi/pip/json}

[ -x "$PIP_AUDIT" ] || { echo "audit: $PIP_AUDIT not found (make install-test installs pip-audit)" >&2; exit 1; }

if ! why=$("$PYTHON" - "$PROBE" <<'PY' 2>&1
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        r.read(1)
except Exception as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
PY
); then
    if [ "${AUDIT_REQUIRED:-0}" = 1 ]; then
        echo "audit: FAILED: the vulnerability service is unreachable ($PROBE: $why) and AUDIT_REQUIRED=1" >&2
        exit 1
    fi
    echo "audit: SKIPPED, nothing was audited: the vulnerability service is unreachable ($PROBE: $why)"
    exit 0
fi

if "$PIP_AUDIT" --local --skip-editable --progress-spinner off; then
    echo "audit: passed (pip-audit found no known vulnerability)"
else
    rc=$?
    echo "audit: FAILED (pip-audit exit $rc: a known vulnerability, or the audit could not finish)" >&2
    exit "$rc"
fi
