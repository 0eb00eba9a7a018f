"""Remote-address patterns (spec 2.3): the spec's table, then compiled patterns against a
naive reference over generated addresses."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.auth.address import AddressPatternError, compile_pattern, is_ipv4, java_expand_ip, normalize_peer, peer_host

TABLE = [
    # pattern, matching hosts, non-matching hosts
    (None, [], ["192.168.0.1", "::1"]),
    ("", [], ["192.168.0.1"]),
    ("   ", [], ["192.168.0.1"]),
    ("*", ["192.168.0.1", "::1"], []),
    ("*.*.*.*", ["10.1.2.3"], []),
    ("*:*:*:*:*:*:*:*", ["10.1.2.3", "fe80::1"], []),
    ("192.168.1.{1,2,3}", ["192.168.1.1", "192.168.1.2", "192.168.1.3"], ["192.168.1.4", "192.168.1.10"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("192.168.1.1,192.168.1.2", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
    ("192.168.*.*", ["192.168.0.1", "192.168.255.255"], ["192.169.0.1", "10.168.0.1"]),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.77"], ["192.168.2.1"]),
    ("192.168.1-5.*", ["192.168.1.9", "192.168.5.0"], ["192.168.0.9", "192.168.6.9"]),
    ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.9", "192.168.1.21", "192.168.2.15"]),
    # octets after the range are ignored, as 4.9.8 does
    ("192.*.1.1", ["192.55.66.77", "192.0.1.1"], ["193.0.1.1"]),
    ("192.168.1-5.7", ["192.168.3.200"], []),
    # a range whose end is 0 is passed over; with nothing else it never matches
    ("192.168.1.0-0", [], ["192.168.1.0"]),
    ("10.0-0.*.*", [], ["10.0.1.1"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2", "192.168.0.10"]),
    (
        "1050:0:0:0:5:600:300c:326b",
        ["1050::5:600:300c:326b", "1050:0000:0:0:5:600:300C:326B"],
        ["1050::5:600:300c:326c"],
    ),
    ("1050:0:0:0:5:600:300c:*", ["1050::5:600:300c:1", "1050::5:600:300c:ffff"], ["1050::5:600:300d:1"]),
    ("1050:0:0:0:5:600:300c:1-ff", ["1050::5:600:300c:1", "1050::5:600:300c:ff"], ["1050::5:600:300c:100"]),
    ("2::ac5:78:1-200:*", ["2::ac5:78:1:9", "2::ac5:78:200:0"], ["2::ac5:78:201:9", "3::ac5:78:1:9"]),
    ("::1,192.168.0.1", ["::1", "0:0:0:0:0:0:0:1", "192.168.0.1"], ["::2"]),
    ("fe80::{1,2}", ["fe80::1", "fe80::2"], ["fe80::3"]),
]


@pytest.mark.parametrize(("pattern", "yes", "no"), TABLE)
def test_spec_table(pattern: str | None, yes: list[str], no: list[str]) -> None:
    compiled = compile_pattern(pattern)
    for host in yes:
        assert compiled.matches(host), (pattern, host)
    for host in no:
        assert not compiled.matches(host), (pattern, host)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("192.168.1.1,2,3", "Netaddress examine Exception netaddress is 2"),
        ("10.0.0.0/8", "Netaddress examine Exception netaddress is 10.0.0.0/8"),
        ("192.168.0.256", "netaddress is 192.168.0.256"),
        ("192.168.0.01", "netaddress is 192.168.0.01"),
        ("localhost", "netaddress is localhost"),
        ("192.168.*", "scope Exception netaddress is 192.168.*"),
        ("192.168.1.20-10", "start is 20 , end is 10"),
        ("192.168.1.10-300", "start is 10 , end is 300"),
        ("192.168.1.-5", "value -5"),
        ("192.168.1.x-5", "value x-5"),
        ("192.168.{1,2}.3}", "examine scope"),
        ("192.{1,2}", "wrong format"),
        ("1050:0:0:0:5:600:*:1", "scope Exception netaddress is 1050:0:0:0:5:600:*:1"),
        ("1050:0:0:0:5:1-2:3:4", "scope Exception"),
        ("abc.def.*.*", "scope Exception"),
        ("fe80::1%eth0", "netaddress is fe80::1%eth0"),
    ],
)
def test_rejected_patterns(pattern: str, message: str) -> None:
    with pytest.raises(AddressPatternError, match=message.replace("*", r"\*").replace("{", r"\{").replace(".", r"\.")):
        compile_pattern(pattern)


def test_peer_host_cuts_the_port_like_java() -> None:
    assert peer_host("192.168.1.5:53211") == "192.168.1.5"
    assert peer_host("/192.168.1.5:53211") == "192.168.1.5"
    assert peer_host("0:0:0:0:0:0:0:1:53211") == "0:0:0:0:0:0:0:1"
    assert peer_host("[::1]:53211") == "::1"
    assert peer_host("10.0.0.1") == "10.0.0.1"
    assert peer_host("[::ffff:10.0.0.1]:9") == "10.0.0.1"


def test_ipv4_mapped_peers_match_ipv4_patterns() -> None:
    assert normalize_peer("::ffff:10.0.0.1") == "10.0.0.1"
    assert normalize_peer("::1") == "::1"
    assert compile_pattern("10.0.0.*").matches(normalize_peer("::ffff:10.0.0.9"))


def test_java_expand_ip() -> None:
    assert java_expand_ip("1050::5:600:300c:326b", 8) == "1050:0000:0000:0000:0005:0600:300C:326B"
    assert java_expand_ip("::1", 8) == "0000:0000:0000:0000:0000:0000:0000:0001"
    assert java_expand_ip("2::ac5:78", 6) == "0002:0000:0000:0000:0AC5:0078"


# ------------------------------------------------------------------ against a reference
octets = st.integers(min_value=0, max_value=255)
ipv4s = st.tuples(octets, octets, octets, octets).map(lambda t: ".".join(map(str, t)))


@st.composite
def range4_patterns(draw: st.DrawFn) -> tuple[str, int, list[int], int, int]:
    """(pattern, range position, literal head, low, high) with a usable range (high > 0)."""
    index = draw(st.integers(min_value=1, max_value=3))
    head = draw(st.lists(octets, min_size=index, max_size=index))
    low = draw(st.integers(min_value=0, max_value=255))
    high = draw(st.integers(min_value=max(low, 1), max_value=255))
    spec = "*" if draw(st.booleans()) else f"{low}-{high}"
    if spec == "*":
        low, high = 0, 255
    tail = draw(
        st.lists(st.one_of(octets.map(str), st.just("*"), st.just("3-9")), min_size=3 - index, max_size=3 - index)
    )
    pattern = ".".join([*map(str, head), spec, *tail])
    return pattern, index, head, low, high


@settings(max_examples=300, deadline=None)
@given(p=range4_patterns(), hosts=st.lists(ipv4s, max_size=10))
def test_range4_agrees_with_reference(p: tuple[str, int, list[int], int, int], hosts: list[str]) -> None:
    pattern, index, head, low, high = p
    compiled = compile_pattern(pattern)
    # also a host that shares the head, so matches are exercised, not only misses
    hosts = [*hosts, ".".join(map(str, [*head, low, 0, 0, 0][:4]))]
    for host in hosts:
        parts = [int(x) for x in host.split(".")]
        expected = parts[:index] == head and low <= parts[index] <= high
        assert compiled.matches(host) == expected, (pattern, host)


@settings(max_examples=200, deadline=None)
@given(members=st.lists(ipv4s, min_size=2, max_size=5, unique=True), hosts=st.lists(ipv4s, max_size=10))
def test_comma_set_agrees_with_reference(members: list[str], hosts: list[str]) -> None:
    compiled = compile_pattern(",".join(members))
    for host in [*hosts, *members]:
        assert compiled.matches(host) == (host in members)


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.tuples(octets, octets, octets),
    last=st.lists(octets, min_size=1, max_size=5, unique=True),
    hosts=st.lists(octets, max_size=10),
)
def test_brace_set_agrees_with_reference(prefix: tuple[int, int, int], last: list[int], hosts: list[int]) -> None:
    base = ".".join(map(str, prefix))
    compiled = compile_pattern(f"{base}.{{{','.join(map(str, last))}}}")
    for h in [*hosts, *last]:
        assert compiled.matches(f"{base}.{h}") == (h in last)
    assert not compiled.matches(f"{prefix[0]}.{(prefix[1] + 1) % 256}.{prefix[2]}.{last[0]}")


groups = st.integers(min_value=0, max_value=0xFFFF)
ipv6s = st.lists(groups, min_size=8, max_size=8).map(
    lambda g: str(ipaddress.IPv6Address(":".join(f"{x:x}" for x in g)))
)


@settings(max_examples=300, deadline=None)
@given(
    head=st.lists(groups, min_size=7, max_size=7),
    shape=st.sampled_from(["last*", "last-range", "range:*"]),
    low=groups,
    span=st.integers(min_value=1, max_value=0xFFFF),
    hosts=st.lists(ipv6s, max_size=8),
    compressed=st.booleans(),
)
def test_range6_agrees_with_reference(
    head: list[int], shape: str, low: int, span: int, hosts: list[str], compressed: bool
) -> None:
    high = min(0xFFFF, low + span)
    lit = [f"{g:x}" for g in head]
    if shape == "last*":
        pattern, n, lo, hi = ":".join([*lit, "*"]), 7, 0, 0xFFFF
    elif shape == "last-range":
        pattern, n, lo, hi = ":".join([*lit, f"{low:x}-{high:x}"]), 7, low, high
    else:
        pattern, n, lo, hi = ":".join([*lit[:6], f"{low:x}-{high:x}", "*"]), 6, low, high
    compiled = compile_pattern(pattern)
    near = str(ipaddress.IPv6Address(":".join([*lit[:n], f"{lo:x}", *(["0"] * (7 - n))])))
    for host in [*hosts, near]:
        g = [int(x, 16) for x in ipaddress.IPv6Address(host).exploded.split(":")]
        expected = g[:n] == head[:n] and lo <= g[n] <= hi
        assert compiled.matches(host) == expected, (pattern, host)
        if compressed:
            assert compiled.matches(ipaddress.IPv6Address(host).exploded) == expected


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.one_of(st.text(max_size=40), st.text(alphabet="0123456789.*-,{}:abcdef ", max_size=40)),
    host=st.text(max_size=40),
)
def test_compile_raises_only_pattern_errors_and_match_never_raises(pattern: str, host: str) -> None:
    try:
        compiled = compile_pattern(pattern)
    except AddressPatternError:
        return
    assert compiled.matches(host) in (True, False)
    assert compiled.matches(peer_host(host)) in (True, False)


def test_is_ipv4_is_commons_validator_strict() -> None:
    assert is_ipv4("0.0.0.0") and is_ipv4("255.255.255.255")
    assert not is_ipv4("01.2.3.4") and not is_ipv4("1.2.3") and not is_ipv4("1.2.3.256") and not is_ipv4("١.2.3.4")
