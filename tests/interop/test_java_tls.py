"""The real RocketMQ 4.9.8 Java client over TLS (issue 12 items 4 and 8; spec
rocketmq-4x-acl-tls.md §3.3): ``-Dtls.enable=true`` produces and consumes against rmq in
permissive mode (the default: no tls.* key, self-signed certificates) and in enforcing mode
(NameServer and broker); in enforcing mode the same client without TLS is refused and
stores nothing.

The Java program is tests/interop/java/TlsClient.java, compiled by this module with javac
against ``../shared/rocketmq-4.9.8`` (``bin/rocketmq classpath``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.client.api import MQClientAPI
from rmq.remoting.client import RemotingClient
from rmq.remoting.tls import TlsSettings, client_context
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.interop.conftest import INSTALL_SCRIPT, REPO

pytestmark = pytest.mark.timeout(300)

ROCKETMQ = REPO.parent / "shared" / "rocketmq-4.9.8" / "bin" / "rocketmq"
SOURCE = REPO / "tests" / "interop" / "java" / "TlsClient.java"
N = 5


@pytest.fixture(scope="module")
def java_classes() -> Iterator[Path]:
    """TlsClient.class, compiled into a temporary directory."""
    if not ROCKETMQ.exists():
        pytest.fail(f"the RocketMQ 4.9.8 distribution is missing: {ROCKETMQ}")
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail(f"no javac on PATH: run {INSTALL_SCRIPT} (installs default-jdk-headless)")
    classpath = subprocess.run([str(ROCKETMQ), "classpath"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="rmq-java-tls-") as d:
        out = subprocess.run([javac, "-cp", classpath, "-d", d, str(SOURCE)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        yield Path(d)


def run_java(
    classes: Path, home: Path, namesrv: str, topic: str, tag: str, *, tls: bool
) -> subprocess.CompletedProcess:
    flags = ["-Dtls.enable=true"] if tls else []
    # a tls.config.file that does not exist: /etc/rocketmq/tls.properties must not leak in
    flags.append(f"-Dtls.config.file={home / 'no-tls.properties'}")
    env = {"PATH": "/usr/bin:/bin", "EXTRA_CP": str(classes), "ROCKETMQ_USER_HOME": str(home), "JAVA_HEAP": "256m"}
    return subprocess.run(
        [str(ROCKETMQ), "java", *flags, "TlsClient", namesrv, topic, str(N), tag],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
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
