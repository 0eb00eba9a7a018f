"""`rmq proxy` serves plaintext and TLS gRPC on one port (tls.server.mode permissive, the default):
the 5.x Python SDK with ``tls_enable=True`` and without it both send through the same address;
in enforcing mode a plaintext client is refused. Certificate: ours, for "localhost"
(tls.test.mode.enable=false, tls.server.certPath / keyPath); the SDK trusts it through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.proxy import pb
from rmq.remoting.tls import self_signed_pem
from tests.interop.conftest import Cluster, _start_cluster, unique_name
from tests.interop.test_python5_proxy import run_driver
from tests.proxy.harness import ProxyProcess, proxy_process

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tls_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path, list[str]]]:
    wd = tmp_path_factory.mktemp("py5tls")
    cert, key = self_signed_pem("localhost")
    (wd / "cert.pem").write_bytes(cert)
    (wd / "key.pem").write_bytes(key)
    defines = [
        "tls.test.mode.enable=false",
        f"tls.server.certPath={wd / 'cert.pem'}",
        f"tls.server.keyPath={wd / 'key.pem'}",
        f"tls.config.file={wd / 'tls.properties'}",
    ]
    (wd / "tls.properties").write_text("")
    yield from ((c, wd, defines) for c in _start_cluster(wd, broker_conf={"autoCreateTopicEnable": "true"}))


def _proxy(cluster: Cluster, wd: Path, defines: list[str], mode: str) -> ProxyProcess:
    p = proxy_process(cluster.namesrv_addr, wd, f"tls.server.mode={mode}", *defines, name=f"proxy-{mode}")
    p.start()
    return p


def test_tls_and_plaintext_on_one_port(tls_setup) -> None:
    cluster, wd, defines = tls_setup
    p = _proxy(cluster, wd, defines, "permissive")
    try:
        endpoints = f"localhost:{p.addr.rsplit(':', 1)[1]}"
        topic = unique_name("py5-tls")
        env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(wd / "cert.pem")}
        spec = {"topic": topic, "messages": [{"body": "over-tls"}], "tls": True}
        assert [e["body"] for e in run_driver("send", endpoints, spec, env=env) if e["event"] == "sent"] == ["over-tls"]
        spec = {"topic": topic, "messages": [{"body": "plaintext"}]}
        assert [e["body"] for e in run_driver("send", endpoints, spec) if e["event"] == "sent"] == ["plaintext"]
        assert set(cluster.wait_truth(topic, 2)) == {"over-tls", "plaintext"}
    finally:
        p.stop()


async def test_enforcing_refuses_plaintext(tls_setup) -> None:
    cluster, wd, defines = tls_setup
    p = _proxy(cluster, wd, defines, "enforcing")
    try:
        port = p.addr.rsplit(":", 1)[1]
        Req, Resp = pb.msg("QueryRouteRequest"), pb.msg("QueryRouteResponse")
        md = (("x-mq-client-id", "t@1@0@x"),)
        req = Req(topic=pb.msg("Resource")(name="T"))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await ch.unary_unary(f"/{pb.SERVICE}/QueryRoute", Req.SerializeToString, Resp.FromString)(
                    req, metadata=md, timeout=5
                )
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        creds = grpc.ssl_channel_credentials(root_certificates=(wd / "cert.pem").read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{port}", creds) as ch:
            resp = await ch.unary_unary(f"/{pb.SERVICE}/QueryRoute", Req.SerializeToString, Resp.FromString)(
                req, metadata=md, timeout=10
            )
            assert resp.status.code == pb.Code.OK
    finally:
        p.stop()
