"""Remote-address patterns of plain_acl.yml (spec 2.3, ``RemoteAddressStrategyFactory``).

A pattern is compiled once, when its file is loaded, into an ``AddressPattern`` whose
``matches(host)`` runs per request. The kinds, tried in 4.9.8's order:

* blank or absent            -> never matches;
* ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*`` -> always matches;
* ends with ``}``            -> the set ``prefix{a,b,...}`` expands to (IPv4 and IPv6);
* contains ``,``             -> the set of the listed full addresses;
* contains ``*`` or ``-``    -> a range on the *first* octet (IPv4: of 2-4) / group
  (IPv6) that is ``*`` or ``a-b``; the ones before it match literally, the ones after
  it are ignored (``192.*.1.1`` matches ``192.55.66.77``), as 4.9.8 does;
* anything else              -> one exact address (IPv6 compared fully expanded).

Where 4.9.8 throws at *match* time (NullPointerException or StringIndexOutOfBounds on a
range pattern that never found its range group, e.g. ``192.168.1.0-0``), the pattern
here simply never matches: one odd line in the global white list must not fail every
request. Patterns 4.9.8 rejects at load time are rejected here too (``AddressPatternError``),
also where it would have rejected them with an unchecked Java exception rather than an
AclException.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "AddressPatternError",
    "AddressPattern",
    "compile_pattern",
    "peer_host",
    "normalize_peer",
    "is_ipv4",
    "is_ipv6",
    "java_expand_ip",
]


class AddressPatternError(ValueError):
    """A pattern 4.9.8 refuses to load. The message is 4.9.8's where it has one."""


# commons-validator InetAddressValidator: four decimal octets, 0-255, no leading zeros.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4: Final = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")
# Integer.parseInt's syntax (radix 10 / 16): optional sign, then digits.
_JAVA_DEC: Final = re.compile(r"[+-]?[0-9]+")
_JAVA_HEX: Final = re.compile(r"[+-]?[0-9a-fA-F]+")
_ANY_PATTERNS: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def is_ipv4(text: str) -> bool:
    return _IPV4.fullmatch(text) is not None


def is_ipv6(text: str) -> bool:
    # A zone id (%eth0) is not an address commons-validator accepts; ipaddress would.
    if ":" not in text or "%" in text:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _split(text: str, sep: str) -> list[str]:
    """``StringUtils.split(text, sep)`` for a one-character separator: no empty tokens."""
    return [t for t in text.split(sep) if t]


def java_expand_ip(text: str, groups: int) -> str:
    """``AclUtils.expandIP``: upper-case, widen ``::`` to fill ``groups`` groups, pad each to 4.

    Only a plain-hex IPv6 address comes out as its canonical 8x4 form; for pattern
    prefixes (fewer groups) this is the string 4.9.8 compares a peer's expansion with.
    """
    text = text.upper()
    pad = groups - text.count(":")
    if pad > 0:
        text = text.replace("::", ":" * (pad + 1))
    return ":".join(p.rjust(4, "0") for p in text.split(":"))


def _explode6(host: str) -> str | None:
    """A peer's IPv6 address as 8 upper-case 4-digit groups, or None if it is not IPv6."""
    if ":" not in host or "%" in host:
        return None
    try:
        return ipaddress.IPv6Address(host).exploded.upper()
    except ValueError:
        return None


def peer_host(remote_addr: str) -> str:
    """The address 4.9.8 matches: the channel's ``host:port`` string minus its last ``:port``.

    ``PlainAccessValidator.parse`` cuts at the last colon, so ``0:0:0:0:0:0:0:1:53211``
    becomes ``0:0:0:0:0:0:0:1``. A leading ``/`` (Netty's form) and IPv6 brackets go too.
    """
    addr = remote_addr[remote_addr.rfind("/") + 1 :]
    if addr.startswith("[") and "]" in addr:  # [::1]:53211
        return normalize_peer(addr[1 : addr.index("]")])
    if ":" in addr:
        addr = addr[: addr.rfind(":")]
    return normalize_peer(addr)


def normalize_peer(host: str) -> str:
    """An IPv4-mapped IPv6 peer (``::ffff:10.0.0.1``, from a dual-stack socket) as IPv4.

    Java hands such a peer to the ACL as an Inet4Address, so IPv4 patterns must match it.
    """
    if ":" in host and "." in host:
        try:
            mapped = ipaddress.IPv6Address(host).ipv4_mapped
        except ValueError:
            return host
        if mapped is not None:
            return str(mapped)
    return host


Kind = Literal["blank", "any", "set", "range4", "range6"]


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One compiled pattern; ``source`` is the text it came from (None for absent)."""

    source: str | None
    kind: Kind
    members: frozenset[str] = frozenset()  # set: IPv4 as written, IPv6 expanded
    head: tuple[str, ...] = ()  # range: the octets / groups that must match literally
    index: int = 0  # range: position of the octet / group that is range-checked
    low: int = 0
    high: int = 0

    def matches(self, host: str) -> bool:
        """Whether ``host`` (a bare address, see ``peer_host``) is covered. Never raises."""
        kind = self.kind
        if kind == "any":
            return True
        if kind == "set":
            if host in self.members:
                return True
            exploded = _explode6(host)
            return exploded is not None and exploded in self.members
        if kind == "range4":
            if _IPV4.fullmatch(host) is None:
                return False
            parts = host.split(".")
            return tuple(parts[: self.index]) == self.head and self.low <= int(parts[self.index]) <= self.high
        if kind == "range6":
            exploded = _explode6(host)
            if exploded is None:
                return False
            groups = exploded.split(":")
            return tuple(groups[: self.index]) == self.head and self.low <= int(groups[self.index], 16) <= self.high
        return False


BLANK: Final = AddressPattern(None, "blank")


def compile_pattern(pattern: str | None) -> AddressPattern:
    """Compile a ``whiteRemoteAddress`` / global white-list entry; ``AddressPatternError`` if 4.9.8 rejects it."""
    if pattern is None or pattern.strip() == "":
        return AddressPattern(pattern, "blank")
    if pattern in _ANY_PATTERNS:
        return AddressPattern(pattern, "any")
    if pattern.endswith("}"):
        if ":" in pattern:
            parts = _split(pattern, ":")
        else:
            parts = _split(pattern, ".")
            if len(parts) < 4:
                raise AddressPatternError(f"MultipleRemoteAddressStrategy has got a/some wrong format IP(s): {pattern}")
        last = parts[-1]
        if not last.startswith("{"):
            raise AddressPatternError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception: {pattern}")
        prefix = pattern[: pattern.index("{")]
        return _address_set(pattern, [prefix + item for item in _split(last[1:-1], ",")])
    if "," in pattern:
        return _address_set(pattern, _split(pattern, ","))
    if "*" in pattern or "-" in pattern:
        return _range6(pattern) if ":" in pattern else _range4(pattern)
    return _address_set(pattern, [pattern])


def _address_set(pattern: str, addresses: list[str]) -> AddressPattern:
    members: set[str] = set()
    for addr in addresses:
        if is_ipv4(addr):
            members.add(addr)
        elif is_ipv6(addr):
            members.add(java_expand_ip(addr, 8))
        else:
            raise AddressPatternError(f"Netaddress examine Exception netaddress is {addr}")
    return AddressPattern(pattern, "set", frozenset(members))


def _parse_range(value: str, digits: re.Pattern[str], base: int, top: int) -> tuple[int, int]:
    if value.startswith("-"):
        raise AddressPatternError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value}")
    ends = _split(value, "-")
    if len(ends) < 2 or digits.fullmatch(ends[0]) is None or digits.fullmatch(ends[1]) is None:
        raise AddressPatternError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value}")
    start, end = int(ends[0], base), int(ends[1], base)
    if not (0 <= start <= top and 0 <= end <= top and start <= end):
        raise AddressPatternError(
            f"RangeRemoteAddressStrategy netaddress examine scope Exception start is {start} , end is {end}"
        )
    return start, end


def _scope_error(pattern: str) -> AddressPatternError:
    return AddressPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")


def _first_range(parts: list[str], digits: re.Pattern[str], base: int, top: int) -> tuple[int, int, int]:
    """(index, low, high) of the first part after the first that is '*' or 'a-b' with a
    range *end* above 0; index 0 if there is none. 4.9.8 remembers the last range parsed
    while it scans (so '0-0' is passed over, not used), for IPv4 and IPv6 alike."""
    low = high = 0
    for i in range(1, len(parts)):
        value = parts[i].strip()
        if value == "*":
            low, high = 0, top
        elif "-" in value:
            low, high = _parse_range(value, digits, base, top)
        if high > 0:
            return i, low, high
    return 0, low, high


def _range4(pattern: str) -> AddressPattern:
    parts = _split(pattern, ".")
    if len(parts) != 4:
        raise _scope_error(pattern)
    chosen, low, high = _first_range(parts, _JAVA_DEC, 10, 255)
    if chosen == 0:
        return AddressPattern(pattern, "blank")
    # AclUtils.verify(remoteAddr, index - 1): the octets before the one preceding the
    # range must be numbers 0-255 (4.9.8 does not look at that one itself).
    for octet in parts[: chosen - 1]:
        octet = octet.strip()
        if _JAVA_DEC.fullmatch(octet) is None or not 0 <= int(octet) <= 255:
            raise _scope_error(pattern)
    return AddressPattern(
        pattern, "range4", head=tuple(p.strip() for p in parts[:chosen]), index=chosen, low=low, high=high
    )


def _range6(pattern: str) -> AddressPattern:
    # AclUtils.IPv6AddressCheck: '*' only as the last character; a range in the last
    # group, or in the one before a final ':*'.
    asterisk = pattern.find("*")
    minus = pattern.find("-")
    last_colon = pattern.rfind(":")
    if asterisk > -1 and asterisk != len(pattern) - 1:
        raise _scope_error(pattern)
    if minus > -1:
        limit = last_colon if asterisk == -1 else pattern.rfind(":", 0, last_colon)
        if minus <= limit:
            raise _scope_error(pattern)
    chosen, low, high = _first_range(_split(pattern, ":"), _JAVA_HEX, 16, 0xFFFF)
    if chosen == 0:
        return AddressPattern(pattern, "blank")
    for group in _split(java_expand_ip(pattern, 8), ":")[: chosen - 1]:
        if _JAVA_HEX.fullmatch(group) is None or not 0 <= int(group, 16) <= 0xFFFF:
            raise _scope_error(pattern)
    # AclUtils.v6ipProcess: the literal prefix, expanded to 6 groups when the pattern
    # ends 'a-b:*', else to 7; the group right after it is the one range-checked.
    if asterisk > -1 and minus > -1:
        second_colon = pattern.rfind(":", 0, last_colon)
        if second_colon < 0:
            raise _scope_error(pattern)
        head = java_expand_ip(pattern[:second_colon], 6)
    else:
        head = java_expand_ip(pattern[:last_colon], 7)
    head_groups = tuple(_split(head, ":"))
    if len(head_groups) >= 8:
        return AddressPattern(pattern, "blank")
    return AddressPattern(pattern, "range6", head=head_groups, index=len(head_groups), low=low, high=high)
