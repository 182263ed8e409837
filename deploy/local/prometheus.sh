#!/usr/bin/env bash
# Make Debian's Prometheus server binary available for the live-metrics tests (idempotent; root
# on Debian 12/13). Only the binary is used: each test starts its own on a free loopback port
# with a generated config and stops it; the package's own service is not needed.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "prometheus.sh: prometheus is not installed and installing it needs root (apt-get install prometheus)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || { echo "prometheus.sh: apt-get update failed" >&2; exit 1; }
apt-get install -y -qq prometheus >/dev/null || { echo "prometheus.sh: apt-get install prometheus failed" >&2; exit 1; }
command -v prometheus >/dev/null || { echo "prometheus.sh: prometheus still missing after install" >&2; exit 1; }
# the package starts its own server on :9090 (and node exporter on :9100); the tests need
# neither, and a bare machine should not keep them listening
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
fi
