"""Kernel receive stamps: a TCP socket whose every read also returns the time the kernel queued
its last segment (`SO_TIMESTAMPNS`), so a read is stamped with when its bytes arrived, not with
when a busy event loop got round to it (`open_stamped_socket` connects one).

The kernel's software stamp is on the real-time clock; `KernelStamper` turns it into the runner's
monotonic clock as `now_monotonic - (now_realtime - stamp_realtime)`: only the age of the bytes
(microseconds to milliseconds) crosses clocks. A wall-clock step between two reads shows as a jump
in the real-time-minus-monotonic offset; that read keeps its user-space stamp instead.

Linux only (x86-64 and arm64 share the option's number); elsewhere, and on loops that bypass the
socket object (uvloop reads the descriptor itself), `rx_real_ns` stays 0 and callers stamp in
user space as before. So it does for a read the kernel gave no stamp: the kernel switches
receive stamping on system-wide a moment after the first socket asks for it.
"""

from __future__ import annotations

import asyncio
import platform
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SO_TIMESTAMPNS = 35  # asm-generic value; Python's socket module does not export the name
_ARCHES = ("x86_64", "amd64", "aarch64", "arm64")
SUPPORTED = sys.platform == "linux" and platform.machine().lower() in _ARCHES
_TIMESPEC = struct.Struct("@qq")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
_SOL_SOCKET = socket.SOL_SOCKET
STEP_NS = 1_000_000  # an offset change this large between reads is a wall-clock step


class StampedSocket(socket.socket):
    """`recv`/`recv_into` through `recvmsg`, keeping the kernel stamp of the latest read."""

    __slots__ = ("rx_real_ns",)

    def __init__(
        self,
        family: int = socket.AF_INET,
        type_: int = socket.SOCK_STREAM,
        proto: int = 0,
        fileno: int | None = None,
    ) -> None:
        super().__init__(family, type_, proto, fileno)
        self.rx_real_ns = 0

    def enable(self) -> bool:
        """Ask the kernel for receive stamps; False where it will not give them."""
        if not SUPPORTED:
            return False
        try:
            self.setsockopt(_SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        return True

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Read into this thread's scratch buffer and return an exact-size copy: asyncio asks
        for 256 KiB, and a bytes object allocated that large and shrunk keeps far more memory
        than a token's few hundred bytes while it waits in a queue."""
        view = _scratch()
        if bufsize < len(view):
            view = view[:bufsize]
        n, ancillary, _, _ = self.recvmsg_into([view], _ANC_SIZE, flags)
        self.rx_real_ns = _stamp(ancillary)
        return view[:n].tobytes()

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer)
        if nbytes:
            view = view[:nbytes]
        n, ancillary, _, _ = self.recvmsg_into([view], _ANC_SIZE, flags)
        self.rx_real_ns = _stamp(ancillary)
        return n


async def open_stamped_socket(
    loop: asyncio.AbstractEventLoop, host: str, port: int
) -> StampedSocket:
    """A connected non-blocking socket to host:port: each resolved address in turn."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, type_, proto, _, address in infos:
        sock = StampedSocket(family, type_, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as e:
            sock.close()
            error = e
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error if error is not None else OSError(f"{host} resolved to no address")


def _stamp(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The read's kernel stamp (real-time ns), or 0 when the kernel gave none."""
    for level, kind, payload in ancillary:
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET and len(payload) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(payload)
            return int(sec * 1_000_000_000 + nsec)
    return 0


_local = threading.local()
SCRATCH_BYTES = 64 * 1024


def _scratch() -> memoryview:
    view: memoryview | None = getattr(_local, "view", None)
    if view is None:
        view = _local.view = memoryview(bytearray(SCRATCH_BYTES))
    return view


class KernelStamper:
    """Converts kernel real-time stamps to the monotonic clock, refusing across wall steps."""

    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset = 0  # realtime - monotonic at the latest read (0: none yet)

    def to_monotonic(self, rx_real_ns: int, now_mono_ns: int, clock: Callable[[], int]) -> int:
        """The monotonic time of a kernel stamp (never after `now_mono_ns`), or -1 when it
        cannot be trusted."""
        offset = time.time_ns() - clock()  # back to back: a preemption between them is rare
        previous = self.offset
        if previous and abs(offset - previous) > STEP_NS:
            offset = time.time_ns() - clock()  # once more, to tell a preemption from a step
            if abs(offset - previous) > STEP_NS:
                self.offset = offset
                return -1  # the wall clock stepped since the last read: this age may be wrong
        self.offset = offset
        t = rx_real_ns - offset
        return t if t <= now_mono_ns else now_mono_ns
