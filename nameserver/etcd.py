"""An asyncio etcd v3 client over etcd's JSON gateway, for the failover controllers.

Why not a library: ``aetcd`` (asyncio, gRPC) has had a single 1.0.0 release, built over pinned
``grpcio``/``protobuf`` versions that would pin the whole broker's; ``etcd3`` (python-etcd3) is
synchronous and no longer maintained. etcd serves every v3 RPC the controllers need as JSON over
HTTP on its client port (grpc-gateway, on by default: ``POST /v3/kv/range`` ...), so this module
speaks that through ``httpx`` (async, TLS with client certificates, runs on uvloop) and stays
small. What it covers is what the controllers use: range / put / delete / txn, leases, member
status, user authentication.

The gateway's dialect: keys and values are base64 in JSON; int64 fields are strings (we send them
as strings too); fields holding their default value are left out of an answer (no ``kvs``: no
key; no ``lease``: 0; no ``TTL`` in a keepalive answer: the lease is gone). An error answer is
``{"error", "message", "code"}`` with the gRPC code, under the HTTP status grpc-gateway maps it to
(UNAVAILABLE 14 -> 503, UNAUTHENTICATED 16 -> 401, INVALID_ARGUMENT 3 -> 400, ...).

*Endpoints.* ``"host:port"`` (http, or https when a CA file is given), ``"http://host:port"``,
``"https://host:port"``. A call goes to the endpoint that answered last; when that one cannot be
reached, times out (``timeout`` seconds per endpoint), answers HTTP 5xx or says it is unavailable
(no leader, request timed out, leader changed), the call moves on to the next, trying each
endpoint at most once: a call takes at most ``len(endpoints) * timeout`` and then raises
``EtcdUnavailable`` naming every endpoint and what went wrong there. A clean error answer
(a bad request, permission denied, a lease that does not exist) raises ``EtcdError`` at once: the
next member would say the same.

*Writes that are retried.* A write whose endpoint failed after the request went out (a timeout,
a 503 "request timed out", a dropped connection) may still be applied by etcd; moving on to the
next endpoint sends it again. Leader-only decisions are compare-and-swap transactions, for which
that is safe: the second try finds the compare false, and an ``Op.get`` in the failure branch
shows the caller what is stored — its own value, when the first try went through.
``TxnResult.retried`` says when that may have happened.

*Auth.* With ``user``/``password`` the client authenticates on the endpoint in use and sends the
token in the ``Authorization`` header; an answer that the token is invalid (expired simple token,
a restarted member, an auth store revision change) makes it authenticate once more and repeat the
request. The password and the token never reach a log line, an exception or a ``repr``.

*Leases.* etcd grants whole seconds and raises a TTL below its minimum to the minimum: with
default flags (``--heartbeat-interval 100 --election-timeout 1000``) that is 2 s (1.5 x election
timeout, rounded up); with ``--election-timeout 500``, 1 s. ``Lease.ttl`` is what was granted.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import httpx

from rmq.common.properties import PropertiesError

__all__ = [
    "Compare",
    "EndpointStatus",
    "EtcdClient",
    "EtcdError",
    "EtcdException",
    "EtcdSettings",
    "EtcdUnavailable",
    "KeyValue",
    "Lease",
    "Op",
    "OpResult",
    "TxnResult",
    "endpoint_url",
    "prefix_range_end",
]

log = logging.getLogger("rmq.nameserver.etcd")

Key = str | bytes

# gRPC status codes etcd answers with (grpc-gateway keeps them in "code")
GRPC_INVALID_ARGUMENT = 3
GRPC_NOT_FOUND = 5
GRPC_UNAVAILABLE = 14
GRPC_UNAUTHENTICATED = 16

# Answers to a request whose token etcd no longer knows: authenticate again and repeat it.
_STALE_TOKEN_MESSAGES = ("etcdserver: invalid auth token", "etcdserver: user name is empty", "auth store is old")


# ---------------------------------------------------------------------------------- errors
class EtcdException(Exception):
    """Base of the errors this client raises."""


class EtcdError(EtcdException):
    """etcd answered the request with an error (``code``: the gRPC status code)."""

    def __init__(self, message: str, code: int, endpoint: str) -> None:
        super().__init__(f"{message} (code {code}, from {endpoint})")
        self.message = message
        self.code = code
        self.endpoint = endpoint


class EtcdUnavailable(EtcdException):
    """No endpoint answered; ``errors`` maps each endpoint tried to what went wrong there."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        detail = "; ".join(f"{ep}: {why}" for ep, why in errors.items())
        super().__init__(f"etcd unavailable ({detail})")
        self.errors = dict(errors)


class _Unreachable(Exception):
    """One endpoint failed in a way that makes the next one worth trying."""

    def __init__(self, reason: str, maybe_applied: bool) -> None:
        super().__init__(reason)
        self.maybe_applied = maybe_applied


# ---------------------------------------------------------------------------------- values
@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl: int  # seconds, as granted (etcd raises a TTL below its minimum)


@dataclass(frozen=True, slots=True)
class OpResult:
    """The answer to one ``Op`` of a transaction."""

    kind: Literal["put", "get", "delete"]
    kvs: tuple[KeyValue, ...] = ()  # get
    deleted: int = 0  # delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool  # the compares held and the success ops ran
    revision: int  # the store's revision after the transaction
    responses: tuple[OpResult, ...]
    # an earlier try went to an endpoint that failed after the request went out: etcd may have
    # applied it already (see the module docstring)
    retried: bool = False

    @property
    def kv(self) -> KeyValue | None:
        """The first key-value any ``Op.get`` of the branch that ran returned (a failed CAS:
        the current value and revisions), None when there was none."""
        for r in self.responses:
            if r.kvs:
                return r.kvs[0]
        return None


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """One listed endpoint as ``/v3/maintenance/status`` shows it (``rmq admin controllerStatus``)."""

    endpoint: str
    reachable: bool
    version: str = ""
    is_leader: bool = False
    db_size: int = 0
    member_id: int = 0
    leader_id: int = 0
    raft_term: int = 0
    revision: int = 0
    error: str = ""


# ---------------------------------------------------------------------------------- txn builders
_T = TypeVar("_T", int, bytes)
_Target = Literal["VERSION", "CREATE", "MOD", "VALUE", "LEASE"]
_Result = Literal["EQUAL", "NOT_EQUAL", "LESS", "GREATER"]
_OPERAND_FIELD = {"VERSION": "version", "CREATE": "create_revision", "MOD": "mod_revision", "LEASE": "lease"}


def _int_field(target: _Target) -> Callable[[Key], _Operand[int]]:
    def operand(key: Key) -> _Operand[int]:
        return _Operand(_key(key), target)

    return operand


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction. Built as ``Compare.mod_revision(key) == 7``,
    ``Compare.create_revision(key) == 0`` (the key does not exist), ``Compare.value(key) != b"x"``;
    ``<`` and ``>`` too (etcd compares values as bytes)."""

    key: bytes
    target: _Target
    result: _Result
    operand: int | bytes

    # the key's int fields etcd compares: Compare.version(key), .create_revision(key), ...
    version = staticmethod(_int_field("VERSION"))
    create_revision = staticmethod(_int_field("CREATE"))
    mod_revision = staticmethod(_int_field("MOD"))
    lease = staticmethod(_int_field("LEASE"))

    @staticmethod
    def value(key: Key) -> _Operand[bytes]:
        return _Operand(_key(key), "VALUE")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": _b64(self.key), "target": self.target, "result": self.result}
        if isinstance(self.operand, bytes):
            out["value"] = _b64(self.operand)
        else:
            out[_OPERAND_FIELD[self.target]] = str(self.operand)
        return out


class _Operand(Generic[_T]):
    """The left side of a comparison (an int field, or the value as bytes); the operators build
    the ``Compare``."""

    __slots__ = ("_key", "_target")
    __hash__ = None  # type: ignore[assignment]  # == builds a Compare, so no hashing

    def __init__(self, key: bytes, target: _Target) -> None:
        self._key = key
        self._target = target

    def __eq__(self, other: _T) -> Compare:  # type: ignore[override]
        return Compare(self._key, self._target, "EQUAL", other)

    def __ne__(self, other: _T) -> Compare:  # type: ignore[override]
        return Compare(self._key, self._target, "NOT_EQUAL", other)

    def __lt__(self, other: _T) -> Compare:
        return Compare(self._key, self._target, "LESS", other)

    def __gt__(self, other: _T) -> Compare:
        return Compare(self._key, self._target, "GREATER", other)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction branch: ``Op.put(key, value, lease=0)``, ``Op.delete(key)``,
    ``Op.get(key)`` (a failure branch's get returns the current value in the same round trip)."""

    kind: Literal["put", "get", "delete"]
    key: bytes
    value: bytes = b""
    lease: int = 0

    @staticmethod
    def put(key: Key, value: bytes, lease: int = 0) -> Op:
        return Op("put", _key(key), value, lease)

    @staticmethod
    def delete(key: Key) -> Op:
        return Op("delete", _key(key))

    @staticmethod
    def get(key: Key) -> Op:
        return Op("get", _key(key))

    def to_json(self) -> dict[str, Any]:
        if self.kind == "put":
            return {"request_put": _put_body(self.key, self.value, self.lease)}
        if self.kind == "delete":
            return {"request_delete_range": {"key": _b64(self.key)}}
        return {"request_range": {"key": _b64(self.key)}}


# ---------------------------------------------------------------------------------- settings
def endpoint_url(endpoint: str, *, tls: bool = False) -> str:
    """``"host:port"`` (https when ``tls``), ``"http://host:port"`` or ``"https://host:port"`` as
    a base URL; ValueError names what is wrong."""
    text = endpoint.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = ("https" if tls else "http"), text
    scheme = scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"etcd endpoint {endpoint!r}: scheme must be http or https")
    rest = rest.rstrip("/")
    host, colon, port = rest.rpartition(":")
    if not colon or not host or "/" in rest or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"etcd endpoint {endpoint!r}: expected host:port")
    return f"{scheme}://{host}:{int(port)}"


@dataclass(frozen=True)
class EtcdSettings:
    """Where the controllers' etcd is and how to log in, from the NameServer's properties:
    ``controllerEtcdEndpoints=host:port;host:port`` (``,`` separates too; ``http://``/``https://``
    allowed), ``controllerEtcdCaFile`` (bare host:port then means https),
    ``controllerEtcdCertFile`` + ``controllerEtcdKeyFile`` (client certificate),
    ``controllerEtcdUser`` + ``controllerEtcdPassword``."""

    endpoints: tuple[str, ...]
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False, metadata={"secret": True})

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> EtcdSettings:
        """The ``controllerEtcd*`` keys of ``props`` (other keys are not looked at). A bad or
        missing value raises ``PropertiesError`` (a ValueError) whose message starts with the key."""

        def opt(key: str) -> str | None:
            v = props.get(key, "").strip()
            return v or None

        ca_file = opt("controllerEtcdCaFile")
        raw = props.get("controllerEtcdEndpoints", "")
        endpoints = tuple(e.strip() for e in raw.replace(",", ";").split(";") if e.strip())
        if not endpoints:
            raise PropertiesError("controllerEtcdEndpoints: no endpoint given (expected host:port;host:port)")
        for e in endpoints:
            try:
                endpoint_url(e, tls=ca_file is not None)
            except ValueError as err:
                raise PropertiesError(f"controllerEtcdEndpoints: {err}") from None
        files = {k: opt(k) for k in ("controllerEtcdCaFile", "controllerEtcdCertFile", "controllerEtcdKeyFile")}
        for key, path in files.items():
            if path is not None and not os.path.isfile(path):
                raise PropertiesError(f"{key}: no such file: {path}")
        for key, other in (
            ("controllerEtcdCertFile", "controllerEtcdKeyFile"),
            ("controllerEtcdUser", "controllerEtcdPassword"),
        ):
            if (opt(key) is None) != (opt(other) is None):
                missing = key if opt(key) is None else other
                raise PropertiesError(f"{missing}: needed with {other if missing == key else key}")
        return cls(
            endpoints,
            ca_file,
            files["controllerEtcdCertFile"],
            files["controllerEtcdKeyFile"],
            opt("controllerEtcdUser"),
            props.get("controllerEtcdPassword") or None,
        )

    def client(self, timeout: float = 1.0) -> EtcdClient:
        return EtcdClient(
            self.endpoints,
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            user=self.user,
            password=self.password,
            timeout=timeout,
        )


# ---------------------------------------------------------------------------------- client
@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str  # as configured: what logs and errors show
    url: str


class EtcdClient:
    """See the module docstring. One instance per process is enough: calls may run concurrently
    (connections are pooled per endpoint)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 1.0,
    ) -> None:
        if isinstance(endpoints, str):
            raise TypeError("endpoints: a sequence of 'host:port' strings, not one string")
        if not endpoints:
            raise ValueError("etcd: no endpoints")
        if key_file is not None and cert_file is None:
            raise ValueError("etcd: a client key file without its certificate file")
        if (user is None) != (password is None):
            raise ValueError("etcd: user and password go together")
        if timeout <= 0:
            raise ValueError(f"etcd: timeout must be positive, got {timeout}")
        self._endpoints = [_Endpoint(e, endpoint_url(e, tls=ca_file is not None)) for e in endpoints]
        self._timeout = timeout
        self._user = user
        self._password = password
        self._token: str | None = None
        self._auth_lock = asyncio.Lock()
        self._current = 0
        self._http = httpx.AsyncClient(
            verify=_ssl_context(ca_file, cert_file, key_file),
            timeout=httpx.Timeout(timeout),
            trust_env=False,  # an HTTP(S)_PROXY meant for the internet must not carry etcd traffic
            headers={"Content-Type": "application/json"},
        )

    def __repr__(self) -> str:
        return f"EtcdClient({[e.name for e in self._endpoints]!r}, user={self._user!r})"

    @property
    def endpoints(self) -> list[str]:
        return [e.name for e in self._endpoints]

    @property
    def current_endpoint(self) -> str:
        """The endpoint the last successful call used (the next call starts there)."""
        return self._endpoints[self._current].name

    @property
    def timeout(self) -> float:
        """Seconds one endpoint gets per call."""
        return self._timeout

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ kv
    async def get(self, key: Key) -> KeyValue | None:
        a, _ = await self._call("/v3/kv/range", {"key": _b64(_key(key))})
        kvs = _kvs(a)
        return kvs[0] if kvs else None

    async def get_prefix(self, prefix: Key) -> list[KeyValue]:
        """Every key starting with ``prefix``, in key order."""
        p = _key(prefix)
        a, _ = await self._call("/v3/kv/range", {"key": _b64(p), "range_end": _b64(prefix_range_end(p))})
        return _kvs(a)

    async def put(self, key: Key, value: bytes, lease: int = 0) -> int:
        """The store's revision after the put."""
        a, _ = await self._call("/v3/kv/put", _put_body(_key(key), value, lease))
        return _revision(a)

    async def delete(self, key: Key) -> int:
        """How many keys were deleted (0 or 1)."""
        a, _ = await self._call("/v3/kv/deleterange", {"key": _b64(_key(key))})
        return int(a.get("deleted", 0))

    async def txn(
        self, compares: Iterable[Compare], success: Iterable[Op] = (), failure: Iterable[Op] = ()
    ) -> TxnResult:
        """If every compare holds, run ``success``, else ``failure``; one revision, atomic."""
        body = {
            "compare": [c.to_json() for c in compares],
            "success": [o.to_json() for o in success],
            "failure": [o.to_json() for o in failure],
        }
        a, retried = await self._call("/v3/kv/txn", body)
        return TxnResult(
            succeeded=bool(a.get("succeeded", False)),
            revision=_revision(a),
            responses=tuple(_op_result(r) for r in a.get("responses", ())),
            retried=retried,
        )

    # ------------------------------------------------------------------ leases
    async def lease_grant(self, ttl_s: int) -> Lease:
        """A new lease of ``ttl_s`` whole seconds (etcd may grant more: its minimum TTL)."""
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be at least 1 s, got {ttl_s}")
        a, _ = await self._call("/v3/lease/grant", {"TTL": str(int(ttl_s))})
        if a.get("error"):  # LeaseGrantResponse has an error field of its own
            raise EtcdError(str(a["error"]), 0, self.current_endpoint)
        return Lease(int(a["ID"]), int(a.get("TTL", 0)))

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease; its TTL from now (seconds), 0 when etcd no longer has it."""
        a, _ = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)}, stream=True)
        return int(a.get("TTL", 0))

    async def lease_revoke(self, lease_id: int) -> bool:
        """Revoke the lease (its keys go with it); False when etcd did not have it."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease_id)})
        except EtcdError as e:
            if e.code == GRPC_NOT_FOUND:
                return False
            raise
        return True

    # ------------------------------------------------------------------ status
    async def status_all(self) -> list[EndpointStatus]:
        """Every listed endpoint asked at once (no rotation); one answer each, in list order."""
        return list(await asyncio.gather(*(self._status(ep) for ep in self._endpoints)))

    async def _status(self, ep: _Endpoint) -> EndpointStatus:
        try:
            async with asyncio.timeout(self._timeout):
                resp = await self._http.post(ep.url + "/v3/maintenance/status", content=b"{}")
            a = _decode(ep, resp, stream=False)
        except (EtcdError, _Unreachable) as e:
            return EndpointStatus(ep.name, reachable=False, error=str(e))
        except (httpx.TransportError, OSError) as e:  # OSError: also TimeoutError, ssl.SSLError
            return EndpointStatus(ep.name, reachable=False, error=_describe(e, self._timeout))
        header = a.get("header", {})
        member, leader = int(header.get("member_id", 0)), int(a.get("leader", 0))
        return EndpointStatus(
            ep.name,
            reachable=True,
            version=str(a.get("version", "")),
            is_leader=leader != 0 and leader == member,
            db_size=int(a.get("dbSize", 0)),
            member_id=member,
            leader_id=leader,
            raft_term=int(a.get("raftTerm", 0)),
            revision=int(header.get("revision", 0)),
            error="; ".join(str(e) for e in a.get("errors", ())),  # alarms (NOSPACE, CORRUPT)
        )

    # ------------------------------------------------------------------ transport
    async def _call(self, path: str, body: dict[str, Any], *, stream: bool = False) -> tuple[dict[str, Any], bool]:
        """POST to the endpoint in use, then to each other one until one answers. Returns the
        answer and whether an earlier try may have been applied by etcd."""
        content = json.dumps(body).encode()
        errors: dict[str, str] = {}
        maybe_applied = False
        first = self._current
        for k in range(len(self._endpoints)):
            i = (first + k) % len(self._endpoints)
            ep = self._endpoints[i]
            try:
                answer = await self._attempt(ep, path, content, stream)
            except _Unreachable as e:
                errors[ep.name] = str(e)
                maybe_applied = maybe_applied or e.maybe_applied
                log.debug("etcd %s %s: %s", ep.name, path, e)
                continue
            if i != self._current:
                why = "; ".join(f"{name}: {reason}" for name, reason in errors.items()) or "another call moved"
                log.warning("etcd: using %s from now on (%s)", ep.name, why)
                self._current = i
            return answer, maybe_applied
        raise EtcdUnavailable(errors)

    async def _attempt(self, ep: _Endpoint, path: str, content: bytes, stream: bool) -> dict[str, Any]:
        """One endpoint: authenticate when needed, POST, authenticate again once when the token
        was refused. ``_Unreachable`` when the next endpoint is worth trying."""
        sent = False
        try:
            async with asyncio.timeout(self._timeout):
                token = await self._token_for(ep) if self._user is not None else None
                sent = True
                resp = await self._post(ep, path, content, token)
                if token is not None and _stale_token(resp):
                    log.info(
                        "etcd %s: the auth token was refused (HTTP %d); authenticating again", ep.name, resp.status_code
                    )
                    token = await self._reauthenticate(ep, token)
                    resp = await self._post(ep, path, content, token)
        except TimeoutError:
            raise _Unreachable(f"no answer within {self._timeout:g} s", sent) from None
        except (httpx.TransportError, OSError) as e:
            # OSError: httpx lets an ssl.SSLError through when the server's TLS alert (a client
            # certificate refused under TLS 1.3) arrives with the answer rather than the handshake
            not_sent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
            raise _Unreachable(_describe(e, self._timeout), sent and not not_sent) from None
        return _decode(ep, resp, stream)

    async def _post(self, ep: _Endpoint, path: str, content: bytes, token: str | None) -> httpx.Response:
        headers = {"Authorization": token} if token else None
        return await self._http.post(ep.url + path, content=content, headers=headers)

    async def _token_for(self, ep: _Endpoint) -> str:
        token = self._token
        if token is None:
            async with self._auth_lock:  # concurrent first calls authenticate once
                token = self._token
                if token is None:
                    token = self._token = await self._authenticate(ep)
        return token

    async def _reauthenticate(self, ep: _Endpoint, stale: str) -> str:
        async with self._auth_lock:
            token = self._token
            if token is None or token == stale:  # else another call has renewed it meanwhile
                token = self._token = await self._authenticate(ep)
            return token

    async def _authenticate(self, ep: _Endpoint) -> str:
        body = json.dumps({"name": self._user, "password": self._password}).encode()
        resp = await self._post(ep, "/v3/auth/authenticate", body, None)
        try:
            a = _decode(ep, resp, stream=False)
        except EtcdError as e:
            raise EtcdError(f"authentication of user {self._user!r} failed: {e.message}", e.code, ep.name) from None
        token = a.get("token")
        if not isinstance(token, str) or not token:
            raise EtcdError(f"authentication of user {self._user!r}: no token in the answer", 0, ep.name)
        log.info("etcd %s: authenticated as user %s", ep.name, self._user)
        return token


# ---------------------------------------------------------------------------------- codec
def _key(k: Key) -> bytes:
    return k.encode() if isinstance(k, str) else bytes(k)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _put_body(key: bytes, value: bytes, lease: int) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    return body


def prefix_range_end(prefix: bytes) -> bytes:
    """etcd's range end for "every key that starts with ``prefix``": the prefix with its last
    byte below 0xff incremented (0xff bytes after it dropped); ``b"\\0"`` (every key from the
    prefix on) when no byte can be incremented."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"


def _kvs(a: Mapping[str, Any]) -> list[KeyValue]:
    return [
        KeyValue(
            key=base64.b64decode(d.get("key", "")),
            value=base64.b64decode(d.get("value", "")),
            create_revision=int(d.get("create_revision", 0)),
            mod_revision=int(d.get("mod_revision", 0)),
            version=int(d.get("version", 0)),
            lease=int(d.get("lease", 0)),
        )
        for d in a.get("kvs", ())
    ]


def _revision(a: Mapping[str, Any]) -> int:
    return int(a.get("header", {}).get("revision", 0))


def _op_result(r: Mapping[str, Any]) -> OpResult:
    if "response_range" in r:
        return OpResult("get", tuple(_kvs(r["response_range"])))
    if "response_delete_range" in r:
        return OpResult("delete", deleted=int(r["response_delete_range"].get("deleted", 0)))
    return OpResult("put")


def _error_of(resp: httpx.Response, a: Any) -> tuple[int, str] | None:
    """(gRPC code, message) of an error answer, None for a success. A streamed answer (lease
    keepalive) is 200 with ``{"error": {...}}`` in place of ``{"result": ...}``."""
    if isinstance(a, dict) and isinstance(a.get("error"), dict):
        err = a["error"]
        return int(err.get("grpc_code", err.get("code", 0))), str(err.get("message", ""))
    if resp.status_code == 200:
        return None
    if isinstance(a, dict):
        return int(a.get("code", 0)), str(a.get("message") or a.get("error") or "")
    return 0, f"HTTP {resp.status_code} {resp.reason_phrase}"


def _parse(resp: httpx.Response, stream: bool) -> Any:
    text = resp.content
    if stream:  # newline-delimited messages; a keepalive sent once is answered once
        text = next((line for line in text.splitlines() if line.strip()), b"")
    try:
        return json.loads(text)
    except ValueError:
        return None


def _stale_token(resp: httpx.Response) -> bool:
    if resp.status_code not in (400, 401):
        return False
    err = _error_of(resp, _parse(resp, stream=False))
    return err is not None and (err[0] == GRPC_UNAUTHENTICATED or any(m in err[1] for m in _STALE_TOKEN_MESSAGES))


def _decode(ep: _Endpoint, resp: httpx.Response, stream: bool) -> dict[str, Any]:
    a = _parse(resp, stream)
    err = _error_of(resp, a)
    if err is not None:
        code, message = err
        if resp.status_code >= 500 or code == GRPC_UNAVAILABLE:
            raise _Unreachable(f"HTTP {resp.status_code}: {message}", True)
        raise EtcdError(message, code, ep.name)
    if not isinstance(a, dict):
        raise _Unreachable(f"HTTP {resp.status_code}: not an etcd answer", True)
    if stream:
        result = a.get("result", {})
        return result if isinstance(result, dict) else {}
    return a


def _describe(e: BaseException, timeout: float) -> str:
    if isinstance(e, TimeoutError | httpx.TimeoutException):
        return f"no answer within {timeout:g} s"
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    # httpx says "All connection attempts failed"; the socket's error at the bottom says why
    root = e
    for _ in range(8):
        nxt = root.__cause__ or root.__context__
        if nxt is None:
            break
        root = nxt
    if isinstance(root, OSError) and not isinstance(root, ssl.SSLError) and root.errno:
        detail = os.strerror(root.errno)
    else:
        detail = str(root)
    return text if root is e or not detail or detail in text else f"{text}: {detail}"


def _ssl_context(ca_file: str | None, cert_file: str | None, key_file: str | None) -> ssl.SSLContext | bool:
    if ca_file is None and cert_file is None:
        return True  # https endpoints are checked against the system's CAs
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"etcd CA file {ca_file}: {e}") from None
    if cert_file is not None:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"etcd client certificate {cert_file} / key {key_file}: {e}") from None
    return ctx
