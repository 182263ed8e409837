#!/usr/bin/env bash
# Make Debian's headless Chromium available for the browser tests (idempotent; root on Debian).
# Playwright drives it via executable_path; no browser is downloaded at run time.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "chromium.sh: chromium is not installed and installing it needs root (apt-get install chromium)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || { echo "chromium.sh: apt-get update failed" >&2; exit 1; }
apt-get install -y -qq chromium >/dev/null || { echo "chromium.sh: apt-get install chromium failed" >&2; exit 1; }
command -v chromium >/dev/null || { echo "chromium.sh: chromium still missing after install" >&2; exit 1; }
