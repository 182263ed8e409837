"""Re-sending a request whose reused keep-alive connection died before any response byte
(`target.resend_on_stale`): the evidence that the request cannot have reached the server's
application, read the same way by both transports, and the policy that decides on it.

Evidence, from the kernel (Linux TCP_INFO `tcpi_bytes_acked`, read just before the request was
written and again when the close was seen): if the server's TCP acknowledged none of the
bytes we wrote, its application cannot have read them (a server that read the request and then
closed acknowledges it, in the FIN itself at the latest). A reset (RST) with nothing
acknowledged is the same case. Where TCP_INFO cannot be read (another OS) the reach is unknown.

Policy: `true` re-sends after any such close (a hosted API may then bill a duplicate), `false`
never (the request fails as the server's close), unset (the default) re-sends only when the
evidence says the request never reached the server.
"""

from __future__ import annotations

from typing import Any

from loadgen.targets.tcpinfo import acked, read_info


def bytes_acked(sock: Any) -> int | None:
    """The connection's `tcpi_bytes_acked` (payload bytes the peer's TCP acknowledged), or None
    where the kernel does not say (not Linux, not TCP, or the socket is already closed)."""
    return acked(read_info(sock))


def transport_socket(transport: Any) -> Any:
    """The socket under an asyncio transport (or an anyio/httpcore stream), or None."""
    try:
        return transport.get_extra_info("socket") if transport is not None else None
    except (AttributeError, RuntimeError):
        return None


def reached(before: int | None, after: int | None, reset: bool = False) -> bool | None:
    """Did the request reach the server? False when its TCP acknowledged none of it (`after`
    equals `before`, the counts just before our write and when the close was seen), or when
    the connection was reset and the counts are not known; True when it acknowledged some of
    it; None when that cannot be told."""
    if before is not None and after is not None:
        return after > before
    return False if reset else None


def should_resend(policy: bool | None, reach: bool | None) -> bool:
    """`target.resend_on_stale` applied to what is known of the request's reach."""
    if policy is not None:
        return policy
    return reach is False


def not_resent_detail(detail: str, policy: bool | None, reach: bool | None) -> str:
    """The failure's detail when a stale close is not followed by a re-send: why."""
    if policy is False:
        why = "target.resend_on_stale = false"
    elif reach:
        why = "the server's TCP acknowledged the request: its application may have it"
    else:
        why = "whether the server got the request cannot be told here"
    return f"{detail}; reused connection, not re-sent ({why})"
