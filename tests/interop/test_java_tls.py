"""The real RocketMQ 4.9.8 Java client over TLS (issue 12 items 4 and 8; spec
rocketmq-4x-acl-tls.md §3.3): ``-Dtls.enable=true`` produces and consumes against rmq in
permissive mode (the default: no tls.* key, self-signed certificates) and in enforcing mode
(NameServer and broker); in enforcing mode the same client without TLS is refused and
stores nothing. The other way round, rmq.client with ``use_tls`` produces and consumes
against the real 4.9.8 NameServer and broker in enforcing mode.

The Java program is tests/interop/java/TlsClient.java, compiled with javac against
``../shared/rocketmq-4.9.8`` (tests/interop/java_build.py).
"""

from __future__ import annotations

import random
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.child_process import ChildProcess
from rmq.client.api import MQClientAPI
from rmq.client.errors import MQClientError
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from rmq.remoting.tls import TlsSettings, client_context
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, produce_and_consume, unique, wait_until
from tests.interop.java_build import JAVA_SRC, ROCKETMQ_BIN, compile_java, java_env

pytestmark = pytest.mark.timeout(300)

N = 5


@pytest.fixture(scope="module")
def java_classes() -> Iterator[Path]:
    """TlsClient.class, compiled into a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="rmq-java-tls-") as d:
        yield compile_java([JAVA_SRC / "TlsClient.java"], Path(d))


def java_flags(home: Path, *flags: str) -> list[str]:
    """JVM flags, with a tls.config.file that does not exist: /etc/rocketmq/tls.properties,
    4.9.8's default, must not leak into the test."""
    return [*flags, f"-Dtls.config.file={home / 'no-tls.properties'}"]


def run_java(
    classes: Path, home: Path, namesrv: str, topic: str, tag: str, *, tls: bool
) -> subprocess.CompletedProcess:
    flags = java_flags(home, *(["-Dtls.enable=true"] if tls else []))
    return subprocess.run(
        [str(ROCKETMQ_BIN), "java", *flags, "TlsClient", namesrv, topic, str(N), tag],
        capture_output=True,
        text=True,
        timeout=240,
        env=java_env(home, classes),
    )


def tls_admin() -> RemotingClient:
    return RemotingClient(ssl=client_context(TlsSettings()), connect_timeout=5)


async def create_topic(broker: str, namesrv: str, topic: str) -> None:
    """Over TLS (works in every mode but disabled); then wait until the NameServer routes it."""
    async with BrokerApi(broker, client=tls_admin()) as api:
        r = await api.create_topic(topic, 4)
        assert r.code == 0, (r.code, r.remark)
    async with tls_admin() as rc:
        api = MQClientAPI(rc, [namesrv])

        async def routed() -> bool:
            route = await api.get_topic_route_info(topic)
            return route is not None and len(route.queue_datas) == 1

        await wait_until(routed, 15, f"route of {topic}")


async def stored(broker: str, topic: str) -> int:
    async with BrokerApi(broker, client=tls_admin()) as api:
        return sum([await api.max_offset(topic, q) for q in range(4)])


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
async def test_java_client_with_tls_produces_and_consumes(java_classes, mode):
    with tempfile.TemporaryDirectory(prefix="rmq-java-tls-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        ns_args: list[str] = []
        conf: dict[str, object] = {}
        if mode == "enforcing":
            (wd / "namesrv.properties").write_text("tls.server.mode=enforcing\n")
            ns_args = ["-c", str(wd / "namesrv.properties")]
            conf = {"tls.server.mode": "enforcing"}
        with start_namesrv(wd, *ns_args) as ns, start_broker(wd, ns.addr, name="broker-jtls", conf=conf) as br:
            topic = unique("JavaTls")
            await create_topic(br.addr, ns.addr, topic)
            out = run_java(java_classes, wd, ns.addr, topic, "j", tls=True)
            assert out.returncode == 0, out.stdout + out.stderr
            assert "USE_TLS true" in out.stdout
            assert f"DONE sent={N} received={N}" in out.stdout
            assert out.stdout.count("SENT SEND_OK") == N
            assert await stored(br.addr, topic) == N
            if mode == "enforcing":
                # the same client without TLS: refused by the NameServer and the broker
                plain = run_java(java_classes, wd, ns.addr, topic, "p", tls=False)
                assert plain.returncode != 0, plain.stdout
                assert "USE_TLS false" in plain.stdout and "SENT SEND_OK" not in plain.stdout
                assert await stored(br.addr, topic) == N


# --------------------------------------------------------------------------- rmq.client -> Java 4.9.8
def low_free_port(span: int) -> int:
    """A port p with p-2 .. p+span-1 free, below the kernel's ephemeral range (the Java
    broker also binds listenPort-2, its VIP channel, and listenPort+1, its HA port)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        socks = []
        try:
            for p in range(port - 2, port + span):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port range below 32000")


def java_server(wd: Path, name: str, main_class: str, conf: dict[str, object], ready: str) -> ChildProcess:
    (wd / f"{name}.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    (wd / name).mkdir(exist_ok=True)
    flags = java_flags(wd, "-Dtls.server.mode=enforcing")
    argv = [str(ROCKETMQ_BIN), "java", *flags, main_class, "-c", str(wd / f"{name}.conf")]
    return ChildProcess(name, argv, wd, ready, java_env(wd / name, wd))


async def test_rmq_client_with_tls_against_java_4_9_8_enforcing():
    with tempfile.TemporaryDirectory(prefix="rmq-java-tls-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        ns_port, br_port = low_free_port(1), low_free_port(2)
        namesrv = f"127.0.0.1:{ns_port}"
        ns = java_server(
            wd, "jnamesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", {"listenPort": ns_port}, "boot success"
        )
        store = wd / "jbroker-store"
        br = java_server(
            wd,
            "jbroker",
            "org.apache.rocketmq.broker.BrokerStartup",
            {
                "brokerClusterName": "JavaTls",
                "brokerName": "jbroker",
                "brokerIP1": "127.0.0.1",
                "listenPort": br_port,
                "namesrvAddr": namesrv,
                "storePathRootDir": store,
                "storePathCommitLog": store / "commitlog",
                "mappedFileSizeCommitLog": 16 * 1024 * 1024,
                "autoCreateTopicEnable": "true",
            },
            r"The broker\[jbroker",
        )
        try:
            ns.start(60)
            br.start(90)
            topic = unique("RmqToJava")
            # read back with a LitePullConsumer: it pulls with PULL_MESSAGE (11) as Java's,
            # which 4.9.8 knows
            got = await produce_and_consume(namesrv, topic, N, prefix="r-", use_tls=True, poll_ms=500, timeout=60)
            assert got == [f"r-{i}".encode() for i in range(N)]
            # and without TLS the Java servers refuse rmq.client
            async with RemotingClient(connect_timeout=5) as plain:
                with pytest.raises((RemotingError, MQClientError)):
                    await MQClientAPI(plain, [namesrv]).get_topic_route_info(topic)
        finally:
            br.stop()
            ns.stop()
