"""TLS as RocketMQ 4.9.8 does it (``TlsSystemConfig``, ``TlsHelper``, ``NettyRemotingServer``'s
``HandshakeHandler``; spec rocketmq-4x-acl-tls.md §3).

Three parts:

* ``TlsSettings`` and ``parse_tls_settings``: RocketMQ's ``tls.*`` keys, pure. The keys come
  from broker.conf / the NameServer's file (where Java reads JVM system properties), then
  every key but ``tls.server.mode``, ``tls.enable`` and ``tls.config.file`` is overridden by
  the ``tls.config.file`` properties file, as ``TlsHelper.extractTlsConfigFromFile`` does.
  ``load_tls_settings`` reads that file.
* ``decide``: what a server does with a connection whose first byte it has seen (§3.2 table),
  pure; the listening side is ``rmq.remoting.listener``.
* ``server_context`` / ``client_context``: ``ssl.SSLContext`` as ``TlsHelper.buildSslContext``
  builds them. ``tls.test.mode.enable`` (default true) means, as in 4.9.8: the server uses a
  self-signed certificate made at start and ignores the key, certificate and client-auth keys;
  a client trusts any server and sends no certificate. No hostname check and no SNI anywhere
  (4.9.8 creates its SslHandler without a peer host).

Differences from 4.9.8, on purpose: a bad value (``tls.server.mode=enforcign``) stops the start
naming the key instead of falling back to permissive or none (a typo must not silently turn
TLS off); a ``tls.config.file`` that is named but unreadable is an error (the default
``/etc/rocketmq/tls.properties`` is read only when it exists, as in 4.9.8); with
``tls.server.need.client.auth`` optional/require a client certificate is always verified
(against ``tls.server.trustCertPath``, else the system CAs): Python's ``ssl`` cannot accept an
unverified client certificate, which 4.9.8 does with ``tls.server.authClient=false``.
"""

from __future__ import annotations

import datetime
import enum
import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from rmq.common.properties import PropertiesError, convert, parse_properties_text

__all__ = [
    "TlsMode",
    "ClientAuth",
    "TlsSettings",
    "Decision",
    "TLS_HANDSHAKE_BYTE",
    "DEFAULT_CONFIG_FILE",
    "TLS_KEYS",
    "tls_properties",
    "parse_tls_settings",
    "load_tls_settings",
    "decide",
    "server_context",
    "client_context",
    "outbound_context",
    "self_signed_pem",
]

log = logging.getLogger("rmq.remoting")

#: The TLS record type "handshake": the first byte of every ClientHello. A plaintext remoting
#: frame starts with its big-endian length (at most 16 MiB), so its first byte is 0x00 or 0x01.
TLS_HANDSHAKE_BYTE = 0x16
DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"


class TlsMode(str, enum.Enum):  # noqa: UP042  (StrEnum would change str() of a member)
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(str, enum.Enum):  # noqa: UP042
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


@dataclass(frozen=True)
class TlsSettings:
    """RocketMQ's ``TlsSystemConfig``; the defaults are 4.9.8's. Paths "" = not set."""

    server_mode: TlsMode = TlsMode.PERMISSIVE
    #: tls.enable: a client's useTLS. None = not given; a broker then uses TLS on its own
    #: outbound links when its server mode is enforcing (BrokerStartup).
    enable: bool | None = None
    config_file: str = DEFAULT_CONFIG_FILE
    test_mode: bool = True
    server_need_client_auth: ClientAuth = ClientAuth.NONE
    server_key_path: str = ""
    server_key_password: str = field(default="", repr=False)
    server_cert_path: str = ""
    server_auth_client: bool = False
    server_trust_cert_path: str = ""
    client_key_path: str = ""
    client_key_password: str = field(default="", repr=False)
    client_cert_path: str = ""
    client_auth_server: bool = False
    client_trust_cert_path: str = ""

    @property
    def outbound_tls(self) -> bool:
        """Whether a server process (broker) uses TLS on the links it opens itself."""
        return self.enable if self.enable is not None else self.server_mode == TlsMode.ENFORCING

    def to_properties(self) -> dict[str, str]:
        """The settings under RocketMQ's key names (passwords blanked), e.g. for ``-p``."""
        out: dict[str, str] = {}
        for key, name in TLS_KEYS.items():
            v = getattr(self, name)
            if v is None:
                out[key] = ""
            elif isinstance(v, enum.Enum):
                out[key] = v.value
            elif isinstance(v, bool):
                out[key] = "true" if v else "false"
            else:
                out[key] = "******" if name.endswith("password") and v else v
        return out


#: RocketMQ key -> TlsSettings field
TLS_KEYS: dict[str, str] = {
    "tls.server.mode": "server_mode",
    "tls.enable": "enable",
    "tls.config.file": "config_file",
    "tls.test.mode.enable": "test_mode",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.server.keyPath": "server_key_path",
    "tls.server.keyPassword": "server_key_password",
    "tls.server.certPath": "server_cert_path",
    "tls.server.authClient": "server_auth_client",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.client.keyPath": "client_key_path",
    "tls.client.keyPassword": "client_key_password",
    "tls.client.certPath": "client_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.client.trustCertPath": "client_trust_cert_path",
}
# Read from the JVM system properties only, never from tls.config.file (TlsSystemConfig).
_NOT_FROM_FILE = frozenset({"tls.server.mode", "tls.enable", "tls.config.file"})
_TYPES = {f.name: f.type for f in fields(TlsSettings)}


def tls_properties(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split a config file's keys into (the ``tls.*`` ones, the rest)."""
    tls = {k: v for k, v in props.items() if k.startswith("tls.")}
    return tls, {k: v for k, v in props.items() if k not in tls}


def _value(key: str, raw: str, where: str) -> object:
    """``raw`` as the type of ``key``'s field; ``where`` prefixes the key in errors."""
    typ = _TYPES[TLS_KEYS[key]]
    key = where + key
    if typ in ("bool", "bool | None"):
        return convert(key, raw, bool)
    if typ in ("TlsMode", "ClientAuth"):
        enum_type = TlsMode if typ == "TlsMode" else ClientAuth
        try:
            return enum_type(raw.strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in enum_type)
            raise PropertiesError(f"{key}: expected one of {allowed}, got {raw!r}") from None
    return raw.strip()


def parse_tls_settings(
    props: Mapping[str, str], file_props: Mapping[str, str] | None = None, file_name: str = "tls.config.file"
) -> tuple[TlsSettings, list[str]]:
    """``props`` (the ``tls.*`` keys of broker.conf / the NameServer's file), then
    ``file_props`` (the tls.config.file's) over them. Returns the settings and the keys not
    taken (unknown ones, and the three the file may not set), for the caller to warn about.
    ``PropertiesError`` names a bad value's key."""
    values: dict[str, object] = {}
    ignored: list[str] = []
    for source, where in ((props, ""), (file_props or {}, f"{file_name}: ")):
        for key, raw in source.items():
            if key not in TLS_KEYS or (where and key in _NOT_FROM_FILE):
                ignored.append(where + key)
                continue
            values[TLS_KEYS[key]] = _value(key, raw, where)
    return replace(TlsSettings(), **values), ignored  # type: ignore[arg-type]  # typed by _value


def load_tls_settings(props: Mapping[str, str]) -> tuple[TlsSettings, list[str]]:
    """``parse_tls_settings`` with the tls.config.file read: the one named by
    ``tls.config.file`` must be readable; the default one is read when it exists."""
    named = props.get("tls.config.file")
    path = Path((named or DEFAULT_CONFIG_FILE).strip())
    file_props: dict[str, str] | None = None
    if named or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise PropertiesError(f"tls.config.file: cannot read {path}: {e.strerror}") from None
        try:
            file_props = parse_properties_text(text)
        except PropertiesError as e:
            raise PropertiesError(f"tls.config.file {path}: {e}") from None
    return parse_tls_settings(props, file_props, str(path))


# --------------------------------------------------------------------------- same-port detection
class Decision(enum.Enum):
    PLAINTEXT = "plaintext"
    TLS = "tls"
    REFUSE_TLS = "refuse-tls"  # disabled mode, the client starts a TLS handshake
    REFUSE_PLAINTEXT = "refuse-plaintext"  # enforcing mode, the client speaks plaintext


def decide(mode: TlsMode, first_byte: int) -> Decision:
    """The §3.2 table: a connection's fate from its first byte."""
    if first_byte == TLS_HANDSHAKE_BYTE:
        return Decision.REFUSE_TLS if mode == TlsMode.DISABLED else Decision.TLS
    return Decision.REFUSE_PLAINTEXT if mode == TlsMode.ENFORCING else Decision.PLAINTEXT


# --------------------------------------------------------------------------- contexts (I/O)
def self_signed_pem(common_name: str = "localhost") -> tuple[bytes, bytes]:
    """(certificate, PKCS#8 key) PEM of a fresh self-signed certificate, Netty's
    ``SelfSignedCertificate``. An EC P-256 key: made in about a millisecond, and every TLS
    client of RocketMQ (JDK 8+, OpenSSL) speaks ECDSA."""
    # imported here: only a server in test mode needs it, and it is slow to import
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _load_self_signed(ctx: ssl.SSLContext) -> None:
    cert, key = self_signed_pem()
    # SSLContext takes files only; a private directory that lives for the load (Netty writes
    # its self-signed pair to temporary files as well)
    with tempfile.TemporaryDirectory(prefix="rmq-tls-") as d:
        cert_path, key_path = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert_path, key_path)


def _load_pair(ctx: ssl.SSLContext, side: str, cert: str, key: str, password: str) -> None:
    """A PEM certificate chain and its PEM key (PKCS#8, encrypted when ``password``)."""
    try:
        ctx.load_cert_chain(cert, key, password or None)
    except (OSError, ssl.SSLError) as e:
        raise PropertiesError(f"tls.{side}.certPath/keyPath: cannot load {cert} with {key}: {e}") from None


def _load_trust(ctx: ssl.SSLContext, key: str, path: str) -> None:
    if not path:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if key.startswith("tls.server") else ssl.Purpose.SERVER_AUTH)
        return
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise PropertiesError(f"{key}: cannot load {path}: {e}") from None


def server_context(s: TlsSettings) -> ssl.SSLContext:
    """The server side of ``TlsHelper.buildSslContext``. Blocking (reads files, or makes a
    certificate): call it at start, in a thread. ``PropertiesError`` names the key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if s.test_mode:
        ignored = [
            k
            for k, v in (
                ("tls.server.certPath", s.server_cert_path),
                ("tls.server.keyPath", s.server_key_path),
                ("tls.server.trustCertPath", s.server_trust_cert_path),
            )
            if v
        ]
        if s.server_need_client_auth != ClientAuth.NONE:
            ignored.append("tls.server.need.client.auth")
        if ignored:
            log.warning(
                "TLS test mode (tls.test.mode.enable=true, the default): self-signed certificate, %s ignored "
                "as in RocketMQ 4.9.8; set tls.test.mode.enable=false to use them",
                ", ".join(ignored),
            )
        _load_self_signed(ctx)
        return ctx
    if not s.server_cert_path or not s.server_key_path:
        raise PropertiesError(
            "tls.server.certPath: with tls.test.mode.enable=false the server needs "
            "tls.server.certPath and tls.server.keyPath"
        )
    _load_pair(ctx, "server", s.server_cert_path, s.server_key_path, s.server_key_password)
    if s.server_need_client_auth != ClientAuth.NONE:
        if not s.server_auth_client:
            log.warning(
                "tls.server.need.client.auth=%s with tls.server.authClient=false: rmq verifies client "
                "certificates anyway (against tls.server.trustCertPath, else the system CAs)",
                s.server_need_client_auth.value,
            )
        _load_trust(ctx, "tls.server.trustCertPath", s.server_trust_cert_path)
        ctx.verify_mode = ssl.CERT_REQUIRED if s.server_need_client_auth == ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
    return ctx


def client_context(s: TlsSettings) -> ssl.SSLContext:
    """The client side of ``TlsHelper.buildSslContext``: in test mode, or without
    ``tls.client.authServer``, any server certificate is accepted. Reads files when given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # 4.9.8 checks no host name (and sends no SNI)
    if s.test_mode or not s.client_auth_server:
        ctx.verify_mode = ssl.CERT_NONE
    else:
        _load_trust(ctx, "tls.client.trustCertPath", s.client_trust_cert_path)
    if not s.test_mode and (s.client_cert_path or s.client_key_path):
        _load_pair(ctx, "client", s.client_cert_path, s.client_key_path, s.client_key_password)
    return ctx


def outbound_context(s: TlsSettings) -> ssl.SSLContext | None:
    """A server process's client context for its own links (broker -> NameServer,
    slave -> master), or None when they are plaintext (``TlsSettings.outbound_tls``)."""
    return client_context(s) if s.outbound_tls else None
