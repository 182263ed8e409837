"""Ending a test's subprocess: SIGTERM, then SIGKILL if it outlives the grace period."""

from __future__ import annotations

import signal
import subprocess


def stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM `proc` (if it still runs), SIGKILL it after `grace_s`; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
