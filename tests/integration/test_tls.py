"""TLS as RocketMQ 4.9.8 does it (issue 12 item 4, spec rocketmq-4x-acl-tls.md §3), with real
``rmq namesrv`` / ``rmq broker`` processes: ``tls.server.mode`` permissive (the default:
plaintext and TLS on one port, a self-signed certificate made at start), enforcing, disabled;
client certificates (``tls.server.need.client.auth=require``, an encrypted key with
``tls.server.keyPassword``); a broker in enforcing mode registering over TLS and a slave
replicating from its master over TLS (remoting sync and the HA port).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rmq.client import Message, Producer
from rmq.client.errors import MQClientError
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand, decode_frame, encode
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from rmq.remoting.tls import TlsSettings, client_context
from tests.harness import BrokerProcess, broker_process, start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, produce_and_consume, unique, wait_until

pytestmark = pytest.mark.timeout(180)

KEY_PASSWORD = "s3cret-key-pw"


# --------------------------------------------------------------------------- certificates
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key, ca: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    return b.sign(issuer_key, hashes.SHA256())


def _write_pair(d: Path, name: str, cert: x509.Certificate, key, password: str | None = None) -> None:
    (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    (d / f"{name}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
    )


def make_certs(d: Path) -> Path:
    """ca.pem; server.pem/.key (PKCS#8 encrypted with KEY_PASSWORD) and client.pem/.key signed
    by the CA; rogue.pem/.key: a client certificate no one trusts."""
    d.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("rmq test CA", ca_key, "rmq test CA", ca_key, ca=True)
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, password in (("server", KEY_PASSWORD), ("client", None)):
        key = ec.generate_private_key(ec.SECP256R1())
        _write_pair(d, name, _cert(name, key, "rmq test CA", ca_key), key, password)
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    _write_pair(d, "rogue", _cert("rogue", rogue_key, "rogue", rogue_key), rogue_key)
    return d


# --------------------------------------------------------------------------- helpers
TRUST_ANY = TlsSettings()  # test mode: trust any server, no client certificate


def tls_client(settings: TlsSettings = TRUST_ANY) -> RemotingClient:
    return RemotingClient(ssl=client_context(settings), connect_timeout=5)


async def raw_request(addr: str, code: int, ssl_settings: TlsSettings | None) -> tuple[RemotingCommand | None, str]:
    """One request on a fresh connection, plaintext or TLS; (the response or None when the
    server closed without one, the TLS version or "plaintext")."""
    host, port = addr.rsplit(":", 1)
    ctx = None if ssl_settings is None else client_context(ssl_settings)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, int(port), ssl=ctx, server_hostname="" if ctx else None), 10
    )
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        version = "plaintext" if ssl_object is None else ssl_object.version()
        writer.write(encode(RemotingCommand(code=code, opaque=7)))
        try:
            head = await asyncio.wait_for(reader.readexactly(4), 10)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None, version
        (length,) = struct.unpack(">i", head)
        body = await asyncio.wait_for(reader.readexactly(length), 10)
        return decode_frame(head + body), version
    finally:
        writer.close()


async def tls_or_plain_round_trip(namesrv: str, topic: str, tls: bool, n: int = 3) -> None:
    """rmq.client: n messages sent and all of them read back, plaintext or TLS."""
    tag = "tls" if tls else "plain"
    got = await produce_and_consume(namesrv, topic, n, prefix=f"{tag}-", use_tls=tls)
    assert got == [f"{tag}-{i}".encode() for i in range(n)]


async def create_topic(broker: str, namesrv: str, topic: str, client: RemotingClient) -> None:
    async with BrokerApi(broker, client=client) as api:
        r = await api.create_topic(topic, 4)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


def namesrv_conf(d: Path, **keys: str) -> Path:
    path = d / "namesrv.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return path


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rmq-tls-", ignore_cleanup_errors=True) as d:
        yield Path(d)


# --------------------------------------------------------------------------- permissive (default)
@pytest.fixture(scope="module")
def default_cluster() -> Iterator[SimpleNamespace]:
    """No tls.* key anywhere: permissive with self-signed certificates."""
    with tempfile.TemporaryDirectory(prefix="rmq-tls-", ignore_cleanup_errors=True) as d:
        with start_namesrv(Path(d)) as ns, start_broker(Path(d), ns.addr, name="broker-tls") as br:
            yield SimpleNamespace(namesrv=ns.addr, broker=br.addr, ns=ns, br=br)


async def test_permissive_by_default_serves_plaintext_and_tls_on_one_port(default_cluster):
    for addr, code in (
        (default_cluster.namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        (default_cluster.broker, RequestCode.GET_BROKER_RUNTIME_INFO),
    ):
        plain, how = await raw_request(addr, code, None)
        assert how == "plaintext" and plain is not None and plain.code == ResponseCode.SUCCESS
        tls, how = await raw_request(addr, code, TRUST_ANY)
        assert how in ("TLSv1.2", "TLSv1.3") and tls is not None and tls.code == ResponseCode.SUCCESS
    assert "(TLS permissive)" in default_cluster.br.log_text()


async def test_permissive_rmq_client_produces_and_consumes_both_ways(default_cluster):
    topic = unique("TlsT")
    async with tls_client() as rc:
        await create_topic(default_cluster.broker, default_cluster.namesrv, topic, rc)
    await tls_or_plain_round_trip(default_cluster.namesrv, topic, tls=False)
    await tls_or_plain_round_trip(default_cluster.namesrv, topic, tls=True)


def test_rmq_produce_and_admin_take_tls(default_cluster):
    topic = unique("TlsCli")
    run = [sys.executable, "-m", "rmq.cli"]
    out = subprocess.run(
        [*run, "produce", "-a", default_cluster.namesrv, "-t", topic, "-n", "2", "-q", "--tls"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "sent 2 message(s)" in out.stdout
    out = subprocess.run(
        [*run, "admin", "topicStatus", "-n", default_cluster.namesrv, "-t", topic, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "RMQ_TLS": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert sum(int(q["maxOffset"]) for q in json.loads(out.stdout)["queues"]) == 2


# --------------------------------------------------------------------------- enforcing
async def test_enforcing_refuses_plaintext_and_the_broker_registers_over_tls(workdir):
    conf = namesrv_conf(workdir, **{"tls.server.mode": "enforcing"})
    with (
        start_namesrv(workdir, "-c", str(conf)) as ns,
        start_broker(workdir, ns.addr, name="broker-enf", conf={"tls.server.mode": "enforcing"}) as br,
    ):
        for addr, code in (
            (ns.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
            (br.addr, RequestCode.GET_BROKER_RUNTIME_INFO),
        ):
            plain, _ = await raw_request(addr, code, None)
            assert plain is None  # closed without an answer
        topic = unique("EnfT")
        async with tls_client() as rc:
            await create_topic(br.addr, ns.addr, topic, rc)
        # a plaintext send to the broker is refused and stores nothing
        async with BrokerApi(br.addr) as plain_api:
            with pytest.raises(RemotingError):
                await plain_api.send(topic, b"plaintext")
        async with BrokerApi(br.addr, client=tls_client()) as api:
            assert [await api.max_offset(topic, q) for q in range(4)] == [0, 0, 0, 0]
        with pytest.raises(MQClientError):
            async with Producer(unique("pg"), ns.addr) as p:
                await p.send(Message(topic, b"plaintext"))
        # the route comes from the NameServer, which the broker could reach over TLS only
        await tls_or_plain_round_trip(ns.addr, topic, tls=True)
        async with BrokerApi(br.addr, client=tls_client()) as api:
            assert sum([await api.max_offset(topic, q) for q in range(4)]) == 3
        assert "insecure connection while this server is running in SSL enforcing mode" in br.log_text()


# --------------------------------------------------------------------------- disabled
async def test_disabled_refuses_tls(workdir):
    with start_broker(workdir, None, name="broker-off", conf={"tls.server.mode": "disabled"}) as br:
        try:
            tls, _ = await raw_request(br.addr, RequestCode.GET_BROKER_RUNTIME_INFO, TRUST_ANY)
        except OSError:  # the handshake failed: closed under it
            tls = None
        assert tls is None
        plain, _ = await raw_request(br.addr, RequestCode.GET_BROKER_RUNTIME_INFO, None)
        assert plain is not None and plain.code == ResponseCode.SUCCESS

        async def logged() -> bool:
            return "running in SSL disabled mode" in br.log_text()

        await wait_until(logged, 10, "the disabled-mode log line")


# --------------------------------------------------------------------------- client certificates
def mtls_conf(certs: Path, need: str = "require") -> dict[str, object]:
    return {
        "tls.server.mode": "enforcing",
        "tls.enable": "false",  # no NameServer in these tests
        "tls.test.mode.enable": "false",
        "tls.server.certPath": certs / "server.pem",
        "tls.server.keyPath": certs / "server.key",
        "tls.server.keyPassword": KEY_PASSWORD,
        "tls.server.need.client.auth": need,
        "tls.server.authClient": "true",
        "tls.server.trustCertPath": certs / "ca.pem",
    }


def client_settings(certs: Path, who: str | None, trust: str | None = None) -> TlsSettings:
    """A client in non-test mode with ``who``'s certificate (None: none); ``trust``: verify
    the server against that CA file."""
    return TlsSettings(
        test_mode=False,
        client_cert_path=str(certs / f"{who}.pem") if who else "",
        client_key_path=str(certs / f"{who}.key") if who else "",
        client_auth_server=trust is not None,
        client_trust_cert_path=str(certs / trust) if trust else "",
    )


async def test_required_client_certificate(workdir):
    certs = make_certs(workdir / "certs")
    with start_broker(workdir, None, name="broker-mtls", conf=mtls_conf(certs)) as br:
        for who, trust in ((None, None), ("rogue", None), ("client", "rogue.pem")):
            async with BrokerApi(br.addr, client=tls_client(client_settings(certs, who, trust))) as api:
                with pytest.raises(RemotingError):
                    await api.runtime_info()
        # signed by the trusted CA, verifying the server (whose key is encrypted) against it too
        async with BrokerApi(br.addr, client=tls_client(client_settings(certs, "client", "ca.pem"))) as api:
            info = await api.runtime_info()
        assert "brokerVersionDesc" in info


async def test_optional_client_certificate(workdir):
    certs = make_certs(workdir / "certs")
    with start_broker(workdir, None, name="broker-opt", conf=mtls_conf(certs, "optional")) as br:
        for who in (None, "client"):
            async with BrokerApi(br.addr, client=tls_client(client_settings(certs, who))) as api:
                assert "brokerVersionDesc" in await api.runtime_info()
        async with BrokerApi(br.addr, client=tls_client(client_settings(certs, "rogue"))) as api:
            with pytest.raises(RemotingError):
                await api.runtime_info()


def test_wrong_key_password_stops_the_start(workdir):
    certs = make_certs(workdir / "certs")
    conf = {**mtls_conf(certs), "tls.server.keyPassword": "wrong"}
    p = broker_process(workdir, None, name="broker-badkey", conf=conf)
    out = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "broker", "-c", str(p.conf_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out.stderr
    assert "tls.server.certPath/keyPath" in out.stderr


# --------------------------------------------------------------------------- replication over TLS
@pytest.mark.parametrize(
    "mode, credential",
    [
        ("enforcing", None),
        # with the cluster credential the master speaks first on the HA port (its challenge):
        # over TLS the slave's ClientHello comes first anyway; in plaintext the listener lets
        # the silent slave through after its plaintext_after wait
        ("enforcing", "ClusterAK:ClusterSecret1"),
        ("permissive", "ClusterAK:ClusterSecret1"),
    ],
)
async def test_slave_replicates_from_its_master_over_tls(workdir, mode, credential):
    keys: dict[str, object] = {"tls.server.mode": mode}
    if credential is not None:
        keys["innerClientAuthenticationCredentials"] = credential
    conf = namesrv_conf(workdir, **{"tls.server.mode": mode})
    master = {"brokerRole": "ASYNC_MASTER", "brokerId": 0, **keys}
    slave = {"brokerRole": "SLAVE", "brokerId": 1, "slaveSyncInterval": 1000, **keys}
    with start_namesrv(workdir, "-c", str(conf)) as ns:
        with start_broker(workdir, ns.addr, "broker-ha", master) as m:
            with start_broker(workdir / "slave", ns.addr, "broker-ha", slave) as s:
                await _replicates(ns.addr, m, s)


async def _replicates(namesrv: str, m: BrokerProcess, s: BrokerProcess) -> None:
    topic = unique("HaTls")
    async with tls_client() as rc:
        await create_topic(m.addr, namesrv, topic, rc)
    async with Producer(unique("pg"), namesrv, use_tls=True) as p:
        for i in range(10):
            await p.send(Message(topic, f"r{i}".encode()))

    async def status(addr: str) -> dict:
        async with BrokerApi(addr, client=tls_client()) as api:
            r = await api.call(RequestCode.GET_BROKER_HA_STATUS)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return json.loads(r.body)

    async def replicated() -> bool:
        top = (await status(m.addr))["commitLogMaxOffset"]
        return top > 0 and (await status(s.addr))["commitLogMaxOffset"] == top

    await wait_until(replicated, 30, "the slave's CommitLog caught up over TLS")

    async def topic_synced() -> bool:
        async with BrokerApi(s.addr, client=tls_client()) as api:
            r = await api.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        return r.code == ResponseCode.SUCCESS and topic.encode() in (r.body or b"")

    # slave -> master remoting sync (topics) over TLS as well
    await wait_until(topic_synced, 30, "the slave copied the topic from its master")
    assert "insecure connection" not in m.log_text()
