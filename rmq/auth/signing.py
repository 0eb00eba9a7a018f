"""Request signatures (spec 1.2-1.7, 2.4).

The signed content is the ext field *values* (not the keys) concatenated in key order
(Java ``String.compareTo``: UTF-16 code units), without ``Signature``, encoded as
UTF-8, followed by the raw body. The signature is ``Base64(HMAC-SHA1(secretKey, content))``.

Every 4.x client computes it this way: the Java hook over all ext fields (4.9.4+), the
C++ 2.x client and ali-ons over theirs (with ``OnsChannel``, empty strings and JSON
numbers / booleans, which the frame decoder already turns into their literal text).
The one exception the broker makes is ``_UNIQUE_KEY_QUERY``: Java clients up to 4.9.3
do not sign it, 4.9.4+ do, so it is left out only for requests of version <= 399 (the
5.x rule, spec 2.4), not always (4.9.8's bug, spec 6.1).

The HMAC is fed the header part and the body separately, so a 4 MB body is not copied
to be signed (spec 2.11).

The broker checks every request, and a client sends the same header class (the same ext
keys in the same order) again and again: ``SigningOrder`` sorts each such key tuple once
and then picks the values out in one C call (``operator.itemgetter``) for a single join.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from rmq.auth.cache import BoundedCache

__all__ = [
    "ACCESS_KEY",
    "SECRET_KEY",
    "SIGNATURE",
    "SECURITY_TOKEN",
    "ONS_CHANNEL",
    "UNIQUE_KEY_QUERY",
    "DEFAULT_ONS_CHANNEL",
    "LAST_VERSION_NOT_SIGNING_UNIQUE_KEY",
    "SigningError",
    "SigningKey",
    "SigningOrder",
    "ext_value_text",
    "sorted_keys",
    "canonical_content",
    "signed_keys",
    "calculate_signature",
    "sign_request",
    "verify",
]

Buffer = bytes | bytearray | memoryview

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"  # only ever a key name in credential files, never sent
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
ONS_CHANNEL: Final = "OnsChannel"
DEFAULT_ONS_CHANNEL: Final = "ALIYUN"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
# MQVersion.Version.V4_9_3.ordinal(): the last client version that did not sign the ext
# fields added outside its header class (spec 1.3), _UNIQUE_KEY_QUERY among them.
LAST_VERSION_NOT_SIGNING_UNIQUE_KEY: Final = 399
_NEWEST: Final = 0x7FFFFFFF  # a version that signs every field

_EMPTY: Final = b""


class SigningError(ValueError):
    """The client cannot sign (Java's AclSigner refuses an empty secret key)."""


def ext_value_text(value: object) -> str | None:
    """A header value as Java's ``makeCustomHeaderToNet`` / ext map prints it.

    ``True``/``False`` -> ``true``/``false``, ints in decimal, strings as they are, None
    stays None (left out). Floats are refused: a JSON fraction must stay its source text
    (the frame decoder keeps it so), and no header field is a float.
    """
    if value is None or type(value) is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (e.g. a kept JSON number text)
    raise TypeError(f"ext field value of type {type(value).__name__} has no Java string form")


def _utf16_key(key: str) -> bytes:
    # UTF-16BE byte order is code-unit order: what Java's String.compareTo sorts by
    # (it differs from code-point order only for U+E000-U+FFFF versus astral characters).
    return key.encode("utf-16-be", "surrogatepass")


def sorted_keys(keys: Iterable[str]) -> list[str]:
    """Keys in Java ``TreeMap<String, ...>`` order."""
    keys = list(keys)
    if "".join(keys).isascii():  # one C-level pass: the common case sorts as it is
        keys.sort()
        return keys
    return sorted(keys, key=_utf16_key)


def signed_keys(ext: Mapping[str, str], version: int) -> list[str]:
    """The ext keys the broker signs for a request of ``version``, in signing order."""
    if UNIQUE_KEY_QUERY in ext and version <= LAST_VERSION_NOT_SIGNING_UNIQUE_KEY:
        return sorted_keys([k for k in ext if k != SIGNATURE and k != UNIQUE_KEY_QUERY])
    return sorted_keys([k for k in ext if k != SIGNATURE])


def _header_bytes(ext: Mapping[str, str], keys: Iterable[str]) -> bytes:
    # Java's String.getBytes(UTF-8) writes '?' for a lone surrogate; so does "replace".
    return "".join([ext[k] for k in keys]).encode("utf-8", "replace")


def canonical_content(ext: Mapping[str, str], body: Buffer | None, version: int = _NEWEST) -> bytes:
    """The exact bytes that are signed (the broker's view, spec 2.4). For tests and logs."""
    head = _header_bytes(ext, signed_keys(ext, version))
    return head if not body else head + bytes(body)


_Values = Callable[[Mapping[str, str]], tuple[str, ...]]
# No key list worth keeping is this long: Java's largest header class has about 20 fields,
# plus the credentials and _UNIQUE_KEY_QUERY.
_MAX_ORDER_KEYS: Final = 64
_MAX_ORDER_KEY_CHARS: Final = 2048


def _values_in(keys: list[str]) -> _Values:
    if len(keys) > 1:
        return operator.itemgetter(*keys)  # a tuple for 2+ keys
    if keys:
        only = keys[0]
        return lambda ext: (ext[only],)
    return lambda ext: ()


class SigningOrder:
    """The signed keys of each ext key tuple seen, sorted once (bounded memo).

    ``head(ext, version)`` is ``_header_bytes(ext, signed_keys(ext, version))`` exactly:
    the memo is keyed by the ext map's whole key tuple, so it only saves the filtering and
    the sort, never decides what is signed. A key tuple that cannot be sorted (a non-text
    key) raises as ``sorted_keys`` does and is not remembered; very long ones are not
    remembered either (they would pin a client's huge field names in memory).
    """

    __slots__ = ("_orders",)

    def __init__(self, limit: int = 256) -> None:
        # key tuple -> (values for version > 399, values for version <= 399)
        self._orders: BoundedCache[tuple[str, ...], tuple[_Values, _Values]] = BoundedCache(limit)

    def head(self, ext: Mapping[str, str], version: int) -> bytes:
        shape = tuple(ext)
        orders = self._orders.get(shape)
        if orders is None:
            orders = self._learn(shape)
        values = orders[1] if version <= LAST_VERSION_NOT_SIGNING_UNIQUE_KEY else orders[0]
        # Java's String.getBytes(UTF-8) writes '?' for a lone surrogate; so does "replace".
        return "".join(values(ext)).encode("utf-8", "replace")

    def _learn(self, shape: tuple[str, ...]) -> tuple[_Values, _Values]:
        keys = sorted_keys([k for k in shape if k != SIGNATURE])
        current = _values_in(keys)
        # filtering a sorted list keeps it sorted: the same as signed_keys' filter-then-sort
        legacy = current if UNIQUE_KEY_QUERY not in keys else _values_in([k for k in keys if k != UNIQUE_KEY_QUERY])
        orders = (current, legacy)
        if len(shape) <= _MAX_ORDER_KEYS and sum(map(len, shape)) <= _MAX_ORDER_KEY_CHARS:
            self._orders.put(shape, orders)
        return orders


_IPAD: Final = bytes(x ^ 0x36 for x in range(256))
_OPAD: Final = bytes(x ^ 0x5C for x in range(256))


class SigningKey:
    """An HMAC-SHA1 key with its padded inner and outer hash states made once (RFC 2104):
    a request then costs two hash copies in C, not the key schedule and the hmac module's
    Python-level calls (the broker checks every request)."""

    __slots__ = ("_inner", "_outer", "empty")

    def __init__(self, secret_key: str) -> None:
        self.empty = not secret_key  # sign_request refuses to sign with it, as AclSigner does
        key = secret_key.encode("utf-8", "replace")
        if len(key) > 64:  # SHA-1's block size
            key = hashlib.sha1(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha1(key.translate(_IPAD))
        self._outer = hashlib.sha1(key.translate(_OPAD))

    def __repr__(self) -> str:
        return "SigningKey(...)"

    def mac(self, head: bytes, body: Buffer | None) -> bytes:
        inner = self._inner.copy()
        inner.update(head)
        if body:
            inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def _mac(secret_key: str | SigningKey, head: bytes, body: Buffer | None) -> bytes:
    if isinstance(secret_key, SigningKey):
        return secret_key.mac(head, body)
    mac = hmac.new(secret_key.encode("utf-8", "replace"), head, hashlib.sha1)
    if body:
        mac.update(body)
    return mac.digest()


def calculate_signature(content: Buffer, secret_key: str) -> str:
    """``AclSigner.calSignature``: standard Base64 (padded, one line) of HMAC-SHA1."""
    return base64.b64encode(_mac(secret_key, bytes(content), None)).decode("ascii")


def sign_request(
    ext_fields: Mapping[str, object] | None,
    body: Buffer | None,
    access_key: str,
    secret_key: str | SigningKey,
    security_token: str | None = None,
    ons_channel: str | None = None,
    order: SigningOrder | None = None,
) -> dict[str, str]:
    """The ext fields a signing client sends: ``ext_fields`` plus the credentials.

    Defaults are Java 4.9.8's ``AclClientRPCHook``: ``AccessKey`` (and ``SecurityToken``
    when given) are added, every field is signed. ``ons_channel`` set gives the C++ 2.x /
    ali-ons shape (``OnsChannel`` added and signed; they use ``ALIYUN``). Header values
    may be ints and booleans (printed as Java does); None values are left out. A stale
    ``Signature`` in the input (a retried request) is replaced. A client that signs many
    requests passes its ``SigningKey`` and a ``SigningOrder`` it keeps.
    """
    if secret_key.empty if isinstance(secret_key, SigningKey) else not secret_key:
        # AclSigner: "[10015:signature-failed] unable to calculate a request signature."
        raise SigningError("[10015:signature-failed] unable to calculate a request signature. error=empty secret key")
    ext: dict[str, str] = {}
    for key, value in (ext_fields or {}).items():
        # most values are already text: no call for them
        text = value if type(value) is str else ext_value_text(value)
        if text is not None and key != SIGNATURE:
            ext[key] = text
    ext[ACCESS_KEY] = access_key
    if security_token is not None:
        ext[SECURITY_TOKEN] = security_token
    if ons_channel is not None:
        ext[ONS_CHANNEL] = ons_channel
    # a client signs every field it sends (_UNIQUE_KEY_QUERY too: 4.9.4+)
    head = _header_bytes(ext, sorted_keys(ext)) if order is None else order.head(ext, _NEWEST)
    ext[SIGNATURE] = base64.b64encode(_mac(secret_key, head, body)).decode("ascii")
    return ext


def verify(
    ext_fields: Mapping[str, str] | None,
    body: Buffer | None,
    secret_key: str | SigningKey,
    version: int,
    order: SigningOrder | None = None,
) -> bool:
    """Whether ``ext_fields["Signature"]`` signs this request under ``secret_key``.

    Constant-time in the signature; False (never an exception) for anything malformed:
    no ext, no or non-text signature, non-text values. ``order``: the checker's memo of
    signing orders (the result is the same with or without it).
    """
    if not ext_fields:
        return False
    given = ext_fields.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    try:
        if order is None:
            head = _header_bytes(ext_fields, signed_keys(ext_fields, version))
        else:
            head = order.head(ext_fields, version)
        # b64encode without its Python wrapper: the same bytes
        expected = binascii.b2a_base64(_mac(secret_key, head, body), newline=False)
    except (TypeError, ValueError):  # a non-str key or value, a body that is no buffer
        return False
    return hmac.compare_digest(expected, given.encode("utf-8", "replace"))
