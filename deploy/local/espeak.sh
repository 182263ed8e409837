#!/usr/bin/env bash
# Make Debian's espeak-ng available for the speech-in (transcription) workloads and their tests
# (idempotent; root on Debian): it speaks seeded words offline into WAV clips of known length.
# No voice or model is downloaded: espeak-ng's own formant voices ship in the package.
set -euo pipefail
if command -v espeak-ng >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "espeak.sh: espeak-ng is not installed and installing it needs root (apt-get install espeak-ng)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq espeak-ng >/dev/null \
    || { apt-get update -qq >/dev/null && apt-get install -y -qq espeak-ng >/dev/null; } \
    || { echo "espeak.sh: apt-get install espeak-ng failed" >&2; exit 1; }
command -v espeak-ng >/dev/null || { echo "espeak.sh: espeak-ng still missing after install" >&2; exit 1; }
