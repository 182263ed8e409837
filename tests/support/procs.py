"""Ending a test's subprocess: SIGTERM, then SIGKILL if it outlives the grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen[bytes], grace_s: float, *, group: bool = False) -> int:
    """SIGTERM `proc` (if it still runs), SIGKILL it after `grace_s`; its exit code. `group`:
    `proc` leads a process group of its own (started with start_new_session); the signals go to
    the whole group, and a SIGKILL follows for children that outlived it."""
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return int(proc.returncode)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
