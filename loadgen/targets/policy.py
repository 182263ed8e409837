"""Target policy: which URLs a run may send load to. http(s) only; every address the host
resolves to must be public unless the operator allows private targets or allowlists the host or
a CIDR covering it; "public" excludes every IANA special-purpose range (documentation,
benchmarking, reserved, protocol assignments...), which need the same allowance as private ones.
Link-local and cloud metadata addresses need an allowlisted CIDR, always.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from loadgen.errors import PolicyError

ENV_ALLOW_PRIVATE = "PEAKLOAD_ALLOW_PRIVATE_TARGETS"
ENV_ALLOWLIST = "PEAKLOAD_TARGET_ALLOWLIST"
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The IANA IPv4 and IPv6 special-purpose address registries (2024), by name, beyond what
# `ipaddress` flags on every Python version (3.11 calls 192.0.0.192 global). Ranges the
# registry marks globally reachable (e.g. 192.0.0.9/32, 2001:3::/32) stay refused too: a
# load test has no business there without an allowance.
SPECIAL_PURPOSE: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network'"),
    ("100.64.0.0/10", "shared address space, carrier-grade NAT"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.31.196.0/24", "AS112-v4"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.175.48.0/24", "direct delegation AS112 service"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "limited broadcast"),
    ("64:ff9b:1::/48", "IPv4-IPv6 translation (local use)"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy IPv6 prefix"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("2620:4f:8000::/48", "direct delegation AS112 service"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
)
# the most specific range names an address (255.255.255.255 is broadcast before reserved)
_SPECIAL = tuple(
    sorted(
        ((ipaddress.ip_network(n), why) for n, why in SPECIAL_PURPOSE),
        key=lambda e: -e[0].prefixlen,
    )
)
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.I)


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    allow_private: bool = False
    allowlist: list[str] = field(default_factory=list)

    def check(self, url: str) -> None:
        """PolicyError unless `url` may receive load under this policy (resolves the host)."""
        check_target(url, allow_private=self.allow_private, allowlist=self.allowlist)

    def allowing_private(self) -> TargetPolicy:
        """This policy with private targets allowed (a run on the operator's own machine:
        loopback and private networks are theirs); link-local and metadata stay refused."""
        return replace(self, allow_private=True)


def policy_from_env(environ: Mapping[str, str] | None = None) -> TargetPolicy:
    """`PEAKLOAD_ALLOW_PRIVATE_TARGETS` (1/true/yes) and `PEAKLOAD_TARGET_ALLOWLIST`
    (comma-separated host names, IPs or CIDRs)."""
    env = os.environ if environ is None else environ
    flag = env.get(ENV_ALLOW_PRIVATE, "").strip().lower()
    if flag not in ("", "0", "1", "true", "false", "yes", "no"):
        raise PolicyError(f"{ENV_ALLOW_PRIVATE} must be 1/true/yes or 0/false/no, got {flag!r}")
    entries = [e.strip() for e in env.get(ENV_ALLOWLIST, "").split(",") if e.strip()]
    _parse_allowlist(entries, ENV_ALLOWLIST)  # fail early on a bad entry
    return TargetPolicy(flag in ("1", "true", "yes"), entries)


def _parse_allowlist(entries: list[str], where: str) -> tuple[set[str], list[Network]]:
    names: set[str] = set()
    nets: list[Network] = []
    for entry in entries:
        e = entry.strip().strip("[]").lower()
        try:
            nets.append(ipaddress.ip_network(e, strict=False))
            continue
        except ValueError:
            if "/" in e or ":" in e or _NUMERIC_HOST.match(e):
                raise PolicyError(f"{where}: {entry!r} is not a valid IP, CIDR or host") from None
        names.add(e.rstrip("."))
    return names, nets


def _embedded_v4(ip: IPAddress) -> IPAddress:
    """The IPv4 address inside an IPv4-mapped, IPv4-compatible or NAT64 IPv6 address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _kind(ip: IPAddress) -> str | None:
    """Why `ip` is not a public target (None if it is)."""
    ip = _embedded_v4(ip)
    if ip in METADATA:
        return "a cloud metadata address"
    if ip.is_link_local:
        return "link-local"
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    for net, why in _SPECIAL:
        if ip.version == net.version and ip in net:
            return f"special-purpose ({why})"
    if not ip.is_global:
        return "private"
    return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise PolicyError(f"cannot resolve target host {host!r}: {e.strerror or e}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def check_target(url: str, *, allow_private: bool, allowlist: list[str]) -> None:
    """Raise PolicyError unless `url` may receive load under this policy (resolves the host)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise PolicyError(f"target URL must be http or https, got {parts.scheme or 'none'!r}")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise PolicyError("target URL has no host")
    if parts.username or parts.password:
        raise PolicyError("target URL must not carry credentials")
    names, nets = _parse_allowlist(allowlist, "target allowlist")
    if _NUMERIC_HOST.match(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise PolicyError(
                f"target host {host!r} is an IPv4 address in decimal/hex/octal form: "
                "write it as a dotted quad (a.b.c.d)"
            ) from None
    if host in names:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise PolicyError("target URL has an invalid port") from None
    if host == "localhost" or host.endswith(".localhost"):  # loopback by RFC 6761: no lookup
        addrs: list[IPAddress] = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    else:
        addrs = _resolve(host, port)
    for ip in addrs:
        kind = _kind(ip)
        if kind is None or any(ip in net or _embedded_v4(ip) in net for net in nets):
            continue
        if kind in ("link-local", "a cloud metadata address"):
            raise PolicyError(
                f"target host {host!r} resolves to {ip}, {kind}: refused unless an address "
                f"range covering it is in {ENV_ALLOWLIST}"
            )
        if not allow_private:
            raise PolicyError(
                f"target host {host!r} resolves to {ip}, {kind}: set {ENV_ALLOW_PRIVATE}=1 "
                f"or add it to {ENV_ALLOWLIST} to allow it"
            )
