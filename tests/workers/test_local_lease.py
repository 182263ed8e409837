"""The lease of a local run: who is dead, and why (workers.local_lease)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from workers.local_lease import LEASE_S, death_reason, owner_id


def test_a_process_on_this_host_is_asked_directly() -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    owner = f"{socket.gethostname()}:{gone.stdout.strip()}"
    reason = death_reason(owner, age_s=0.5)
    assert reason is not None and "is gone" in reason and owner in reason
    # alive here: a late heartbeat (the store was out) does not make it dead
    assert death_reason(owner_id(), age_s=10 * LEASE_S) is None
    assert owner_id().endswith(f":{os.getpid()}")


def test_a_process_elsewhere_is_judged_by_its_heartbeat() -> None:
    assert death_reason("other-host:123", age_s=LEASE_S / 2) is None
    reason = death_reason("other-host:123", age_s=LEASE_S + 5)
    assert reason is not None and "no heartbeat from its process (other-host:123)" in reason
