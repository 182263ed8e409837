#!/usr/bin/env bash
# The dependency audit `make check` runs: pip-audit over the virtualenv's installed packages
# (peakload itself, installed editable, is skipped). Without network it is skipped with one
# line saying so and that nothing was audited; it prints how many packages were checked and not
# checked, and never reports a pass it did not make (a skip, or a failure under AUDIT_REQUIRED=1).
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

# pip-audit says "No known vulnerabilities found" even when it could look up no package at all
# (an index that answers the probe but not per-version queries): its JSON says which packages
# were checked and which were skipped, and only that decides.
report=$(mktemp)
errlog=$(mktemp)
trap 'rm -f "$report" "$errlog"' EXIT
"$PIP_AUDIT" --local --skip-editable --progress-spinner off --format json -o "$report" \
    >/dev/null 2>"$errlog"
rc=$?
[ "$rc" = 0 ] || tail -n 5 "$errlog" >&2
"$PYTHON" - "$report" "$rc" "${AUDIT_REQUIRED:-0}" <<'PY'
import json, sys
path, rc, required = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
try:
    deps = json.load(open(path))["dependencies"]
except (OSError, ValueError, KeyError, TypeError) as e:
    print(f"audit: FAILED: pip-audit (exit {rc}) wrote no readable report ({e})", file=sys.stderr)
    sys.exit(1)
checked = [d for d in deps if "skip_reason" not in d]
skipped = [d for d in deps if "skip_reason" in d]
vulnerable = [d for d in checked if d.get("vulns")]
print(f"audit: {len(checked)} packages checked, {len(skipped)} not checked")
for d in vulnerable:
    ids = ", ".join(v.get("id", "?") for v in d["vulns"])
    print(f"audit: {d['name']} {d.get('version', '')}: {ids}", file=sys.stderr)
if skipped:
    names = ", ".join(f"{d['name']}" for d in skipped[:20]) + (" ..." if len(skipped) > 20 else "")
    print(f"audit: not checked: {names} ({skipped[0]['skip_reason']})")
if vulnerable:
    print(f"audit: FAILED: {len(vulnerable)} packages with known vulnerabilities", file=sys.stderr)
    sys.exit(1)
if rc != 0:
    print(f"audit: FAILED: pip-audit exit {rc}, the audit could not finish", file=sys.stderr)
    sys.exit(rc)
if skipped and required:
    print(f"audit: FAILED: {len(skipped)} packages could not be looked up and AUDIT_REQUIRED=1",
          file=sys.stderr)
    sys.exit(1)
if not checked:
    print("audit: SKIPPED, nothing was audited: no package could be looked up")
elif skipped:
    print(f"audit: PARTIAL: no known vulnerability in the {len(checked)} packages checked; "
          f"{len(skipped)} were not checked")
else:
    print(f"audit: passed: no known vulnerability in {len(checked)} packages")
PY
