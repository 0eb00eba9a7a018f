"""``rmq proxy -n NAMESRV_ADDRS [-p 8081] [-c FILE]``: the 5.x gRPC endpoint as its own process.

It talks to NameServers and brokers only over remoting, as a client, and keeps no durable
state: several proxies can run behind one address. grpc.aio runs on the process's uvloop
(tests/unit/proxy/test_grpc_uvloop.py shows that it works there).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

import grpc

from rmq.auth.acl_config import AclConfigError
from rmq.auth.credentials import CredentialError, parse_credential, with_cluster_account
from rmq.common.logs import start_server_logging
from rmq.common.net import local_ip
from rmq.common.properties import KeyValueError, PropertiesError, key_value_words
from rmq.proxy.auth import Authenticator
from rmq.proxy.brokers import BrokerAccess
from rmq.proxy.config import ProxyConfig, load_proxy_config
from rmq.proxy.metrics import ProxyMetrics
from rmq.proxy.service import MessagingService
from rmq.proxy.tls_front import TlsFront
from rmq.remoting.acl_guard import acl_home, load_acl_set
from rmq.remoting.tls import TlsMode, TlsSettings, client_context, load_tls_settings, tls_properties
from rmq.runtime.service import PeriodicService

__all__ = ["ProxyServer", "main"]

log = logging.getLogger("rmq.proxy")

HEARTBEAT_PERIOD = 10.0
RENEW_PERIOD = 1.0
#: the largest message plus headroom (the Java proxy's default 130 MiB, grpc's own is 4 MiB)
MAX_GRPC_MESSAGE = 130 * 1024 * 1024


class ProxyServer:
    def __init__(self, cfg: ProxyConfig, raw: dict[str, str] | None = None) -> None:
        self.cfg = cfg
        self.raw = raw or {}
        credential = parse_credential(self.raw.get("innerClientAuthenticationCredentials", ""))
        self.credential = credential
        tls_keys, _ = tls_properties(self.raw)
        self.tls: TlsSettings
        self.tls, ignored = load_tls_settings(tls_keys)
        for k in ignored:
            log.warning("proxy config: TLS key %r ignored", k)
        self.front: TlsFront | None = None
        # towards the brokers like a broker's own links: TLS with tls.enable=true, or by
        # default when the proxy's own port enforces it
        outbound = client_context(self.tls) if self.tls.outbound_tls else None
        self.brokers = BrokerAccess(cfg, request_hook=credential.sign if credential is not None else None, ssl=outbound)
        self.metrics = ProxyMetrics(cfg.proxyClusterName, self.brokers.client_id)
        self.port = cfg.grpcServerPort
        self._server: grpc.aio.Server | None = None
        self._heartbeat = PeriodicService("proxy-heartbeat", HEARTBEAT_PERIOD, self.brokers.heartbeat, log)
        self._renew: PeriodicService | None = None
        self.service: MessagingService | None = None

    @property
    def address(self) -> str:
        host, port = self.advertise()
        return f"{host}:{port}"

    def advertise(self) -> tuple[str, int]:
        if self.cfg.proxyAdvertiseAddress:
            host, _, port = self.cfg.proxyAdvertiseAddress.rpartition(":")
            return host, int(port)
        host = self.cfg.bindAddress if self.cfg.bindAddress not in ("", "0.0.0.0", "::") else local_ip()
        return host, self.port

    async def start(self) -> None:
        acl = None
        if self.raw.get("aclEnable", "false").lower() == "true":
            home = acl_home(self.raw.get("rocketmqHome", ""))
            acl = with_cluster_account(await asyncio.to_thread(load_acl_set, home, log), self.credential)
            log.info("ACL enabled: %d accounts under %s", len(acl.accounts), home)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
                ("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
                ("grpc.so_reuseport", 0),
            ]
        )
        bind = self.cfg.bindAddress or "0.0.0.0"
        if self.tls.server_mode == TlsMode.DISABLED:
            port = server.add_insecure_port(f"{bind}:{self.cfg.grpcServerPort}")
            if port == 0:
                raise OSError(f"cannot listen on {bind}:{self.cfg.grpcServerPort}")
            self.port = port
        else:
            # TLS and plaintext on one port: our listener in front, gRPC on private Unix sockets behind it
            self.front = TlsFront(bind, self.cfg.grpcServerPort, self.tls)
            try:
                await self.front.bind_backends(server)
            except ValueError as e:
                raise OSError(f"TLS: gRPC cannot use the tls.server.* files: {e}") from None
        self.service = MessagingService(
            self.cfg,
            self.brokers,
            Authenticator(acl),
            self.metrics,
            self.advertise(),
            peer_resolver=self.front.real_peer if self.front is not None else None,
        )
        server.add_generic_rpc_handlers((self.service.handler(),))
        await server.start()
        self._server = server
        if self.front is not None:
            await self.front.start()
            self.port = self.front.port
            if self.service is not None:
                self.service.advertise = self.advertise()
        self._heartbeat.start()
        self._renew = PeriodicService("proxy-renew", RENEW_PERIOD, self.service.renewer.renew_due, log)
        self._renew.start()
        if self.cfg.metricsPromExporterPort:
            self.metrics.http.start(bind, self.cfg.metricsPromExporterPort)
        log.info(
            "rmq proxy %s serving apache.rocketmq.v2.MessagingService on %s (TLS %s; NameServers %s)",
            self.brokers.client_id,
            self.address,
            self.tls.server_mode.value,
            self.cfg.namesrvAddr,
        )

    async def stop(self, grace: float = 2.0) -> None:
        await self._heartbeat.stop()
        if self._renew is not None:
            await self._renew.stop()
        if self.front is not None:
            await self.front.close()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self.front is not None:
            await self.front.remove_backends()
        await self.brokers.close()
        if self.metrics.http.serving:
            await asyncio.to_thread(self.metrics.http.stop)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq proxy", description="RocketMQ 5.x gRPC endpoint (cluster mode)")
    p.add_argument("-n", "--namesrv", help="NameServer address list host:port;host:port (namesrvAddr)")
    p.add_argument("-p", "--port", type=int, help="gRPC port (grpcServerPort, default 8081; 0 = any free port)")
    p.add_argument("-c", "--config", help="more keys: a properties file or rmq-proxy.json (RocketMQ ProxyConfig names)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("--log-level", default="INFO")
    return p


async def _run(server: ProxyServer) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except (OSError, AclConfigError) as e:
        log.error("proxy cannot start: %s", e)
        await server.stop(0)
        return 1
    # one line on stdout for whoever started us (make run, tests)
    print(f"rmq proxy listening on {server.address}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_server_logging(args.log_level)
    try:
        overrides = key_value_words(args.defines, strip=True)
    except KeyValueError as e:
        print(f"rmq proxy: -D {e}", file=sys.stderr)
        return 2
    if args.namesrv:
        overrides["namesrvAddr"] = args.namesrv
    if args.port is not None:
        overrides["grpcServerPort"] = str(args.port)
    try:
        cfg, raw = load_proxy_config(args.config, overrides)
        server = ProxyServer(cfg, raw)
    except (PropertiesError, CredentialError, OSError) as e:
        print(f"rmq proxy: bad configuration: {e}", file=sys.stderr)
        return 2
    if not cfg.namesrv_list():
        print("rmq proxy: no NameServer: give -n host:port (or namesrvAddr in -c FILE)", file=sys.stderr)
        return 2
    try:
        import uvloop

        return uvloop.run(_run(server))
    except ImportError:
        return asyncio.run(_run(server))
