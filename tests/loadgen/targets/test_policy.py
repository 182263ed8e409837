"""S3 — target policy: obfuscated IPv4 forms, IPv4-mapped IPv6, metadata and link-local,
localhost names, private ranges, the allowlist, and reading it from the environment.
Only IP literals and localhost names are resolved (no traffic, no external DNS)."""

from __future__ import annotations

import pytest

from loadgen.errors import PolicyError
from loadgen.targets import check_target, policy_from_env

REFUSED_ALWAYS = [
    "http://2130706433/v1",  # decimal 127.0.0.1
    "http://0x7f.1/v1",  # hex
    "http://0177.0.0.1/v1",  # octal
    "http://017700000001/",
    "http://8.8.2056/",  # a.b.c with a 16-bit last part
]
LINK_LOCAL = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[fd00:ec2::254]/",
    "http://169.254.1.1:8080/",
]
PRIVATE = [
    "http://127.0.0.1:8000/v1",
    "http://localhost:8000/v1",
    "http://api.localhost/v1",
    "http://LOCALHOST./v1",
    "http://[::1]:8000/v1",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[64:ff9b::10.0.0.1]/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.10/",
    "http://[fd12:3456::1]/",
    "http://0.0.0.0:8000/",
    "http://[::]/",
    "http://224.0.0.1/",
    "http://100.64.0.1/",
]


@pytest.mark.parametrize("url", REFUSED_ALWAYS)
def test_obfuscated_ipv4_forms_are_refused_even_when_private_is_allowed(url: str) -> None:
    with pytest.raises(PolicyError, match="dotted quad"):
        check_target(url, allow_private=True, allowlist=[])


@pytest.mark.parametrize("url", LINK_LOCAL)
def test_link_local_and_metadata_need_an_allowlisted_range(url: str) -> None:
    with pytest.raises(PolicyError, match=r"link-local|metadata"):
        check_target(url, allow_private=False, allowlist=[])
    with pytest.raises(PolicyError, match=r"link-local|metadata"):
        check_target(url, allow_private=True, allowlist=[])
    check_target(url, allow_private=False, allowlist=["169.254.0.0/16", "fe80::/10", "fd00::/8"])


@pytest.mark.parametrize("url", PRIVATE)
def test_private_targets_refused_unless_allowed(url: str) -> None:
    with pytest.raises(PolicyError, match="PEAKLOAD_ALLOW_PRIVATE_TARGETS"):
        check_target(url, allow_private=False, allowlist=[])
    check_target(url, allow_private=True, allowlist=[])


def test_allowlist_by_host_and_cidr() -> None:
    check_target("http://127.0.0.1:9/v1", allow_private=False, allowlist=["127.0.0.0/8"])
    check_target("http://[::ffff:127.0.0.1]/", allow_private=False, allowlist=["127.0.0.1"])
    check_target("http://localhost:9/v1", allow_private=False, allowlist=["LocalHost"])
    check_target("http://10.0.0.5/", allow_private=False, allowlist=["10.0.0.0/24"])
    with pytest.raises(PolicyError):
        check_target("http://10.0.1.5/", allow_private=False, allowlist=["10.0.0.0/24"])
    with pytest.raises(PolicyError, match="not a valid"):
        check_target("http://8.8.8.8/", allow_private=False, allowlist=["10.0.0.0/33"])


def test_public_literals_and_schemes() -> None:
    check_target("https://8.8.8.8/v1", allow_private=False, allowlist=[])
    check_target("http://[2001:4860:4860::8888]/", allow_private=False, allowlist=[])
    for url in ("ftp://8.8.8.8/", "file:///etc/passwd", "gopher://x/", "//8.8.8.8/"):
        with pytest.raises(PolicyError, match="http or https"):
            check_target(url, allow_private=True, allowlist=[])
    with pytest.raises(PolicyError, match="credentials"):
        check_target("http://u:p@8.8.8.8/", allow_private=True, allowlist=[])


def test_policy_from_env() -> None:
    p = policy_from_env({})
    assert (p.allow_private, p.allowlist) == (False, [])
    p = policy_from_env(
        {
            "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "true",
            "PEAKLOAD_TARGET_ALLOWLIST": " 10.0.0.0/8, gpu-box.internal ,",
        }
    )
    assert p.allow_private and p.allowlist == ["10.0.0.0/8", "gpu-box.internal"]
    p.check("http://127.0.0.1:8000/v1")
    with pytest.raises(PolicyError, match="PEAKLOAD_ALLOW_PRIVATE_TARGETS"):
        policy_from_env({"PEAKLOAD_ALLOW_PRIVATE_TARGETS": "maybe"})
    with pytest.raises(PolicyError, match="PEAKLOAD_TARGET_ALLOWLIST"):
        policy_from_env({"PEAKLOAD_TARGET_ALLOWLIST": "300.1.1.1/8"})


def test_build_target_checks_the_policy_first() -> None:
    from loadgen.runspec.pacing import PacedTarget, Pacer
    from loadgen.runspec.target_spec import TargetSpec
    from loadgen.targets import TargetPolicy, build_target

    spec = TargetSpec(api="openai-chat", base_url="http://169.254.169.254/v1", model="m")
    for policy in (TargetPolicy(), TargetPolicy().allowing_private()):
        with pytest.raises(PolicyError, match="metadata"):
            build_target(spec, policy, max_connections=1)
    built = build_target(spec, None, max_connections=1)  # None: checked by the planner's process
    assert built.sender is built.client
    local = spec.model_copy(update={"base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(PolicyError, match="loopback"):
        build_target(local, TargetPolicy(), max_connections=1)
    paced = build_target(
        local, TargetPolicy().allowing_private(), max_connections=1, pacer=Pacer(60.0, None)
    )
    assert isinstance(paced.sender, PacedTarget) and paced.sender.inner is paced.client
    assert build_target(local, None, max_connections=1, transport="httpx").client.transport == (
        "httpx"
    )


SPECIAL_PURPOSE = [
    ("http://192.0.0.192/v1", "IETF protocol assignments"),  # `ipaddress` on 3.11: global
    ("http://192.0.0.9/v1", "IETF protocol assignments"),  # IANA: globally reachable, still no
    ("http://192.0.2.10/", "documentation (TEST-NET-1)"),
    ("http://198.51.100.7/", "documentation (TEST-NET-2)"),
    ("http://203.0.113.5/", "documentation (TEST-NET-3)"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://192.88.99.1/", "6to4 relay anycast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "limited broadcast"),
    ("http://[::ffff:192.0.0.192]/", "IETF protocol assignments"),
    ("http://[2001:db8::1]/", "documentation"),
    ("http://[3fff::1]/", "documentation"),
    ("http://[2002:c000:0201::1]/", "6to4"),
    ("http://[2001:3::1]/", "IETF protocol assignments"),
    ("http://[100::1]/", "discard-only"),
]


@pytest.mark.parametrize(("url", "why"), SPECIAL_PURPOSE)
def test_iana_special_purpose_ranges_need_an_allowance(url: str, why: str) -> None:
    with pytest.raises(PolicyError, match="special-purpose") as e:
        check_target(url, allow_private=False, allowlist=[])
    assert why in str(e.value)
    check_target(url, allow_private=True, allowlist=[])
    host = url.split("//")[1].split("/")[0].strip("[]")
    net = f"{host}/128" if ":" in host else f"{host}/32"
    check_target(url, allow_private=False, allowlist=[net])
