"""The kernel's TCP_INFO for a connection (Linux): the fields peakload reads from it.

- `tcpi_bytes_acked`: payload bytes the peer's TCP acknowledged (the evidence for re-sending
  a request on a dead kept-alive connection, loadgen/targets/resend.py).
- `tcpi_data_segs_in`: data segments received. When a response's reads so far number as many
  as its data segments, each read held exactly one segment, and a segment has one arrival: the
  token events a read carried together were then written together, and its kernel stamp is
  exact for all of them (loadgen/targets/openai.py).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux only
_TCP_INFO_LEN = 232
# struct tcp_info: 8 bytes of u8s, 24 u32s, 2 u64 pacing rates, then bytes_acked; after it
# bytes_received (u64), segs_out, segs_in, notsent_bytes, min_rtt (u32s), then data_segs_in
_BYTES_ACKED_AT = 120
_DATA_SEGS_IN_AT = 152


def read_info(sock: Any) -> bytes | None:
    """The connection's TCP_INFO, or None where the kernel does not give it (not Linux, not
    TCP, or the socket is already closed)."""
    if _TCP_INFO is None or sock is None:
        return None
    try:
        info: bytes = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
    except (OSError, AttributeError, ValueError):
        return None
    return info if len(info) >= _DATA_SEGS_IN_AT + 4 else None


def acked(info: bytes | None) -> int | None:
    """`tcpi_bytes_acked` of a read TCP_INFO (None: not read)."""
    return None if info is None else int(struct.unpack_from("=Q", info, _BYTES_ACKED_AT)[0])


def data_segments_in(info: bytes | None) -> int | None:
    """`tcpi_data_segs_in` of a read TCP_INFO (None: not read)."""
    return None if info is None else int(struct.unpack_from("=I", info, _DATA_SEGS_IN_AT)[0])
