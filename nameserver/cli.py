"""``rmq namesrv``: run one NameServer until SIGINT/SIGTERM.

``main(argv)`` takes the arguments after ``namesrv``. Once the socket is bound it
logs ``NameServer listening on HOST:PORT`` (stderr), so ``-p 0`` is usable by a
supervisor or a test that reads the port from that line.

``-c FILE`` reads a namesrv.properties with RocketMQ's key names (``nameserver.config``):
``listenPort``, ``kvConfigPath``, ``orderMessageEnable``, the controller's
``enableControllerInNamesrv``, ``controllerMasterTimeout``, RocketMQ's ``tls.*`` keys
(``tls.server.mode``, ...; ``rmq.remoting.tls``), ... Each option below has a key
(named in its help); an option given on the command line wins over the file, e.g.
``-c namesrv.properties -p 9877``. An unknown key is warned about; a bad value stops the
start (exit code 2) naming the key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Sequence

from nameserver.config import NamesrvSettings, load_namesrv_config
from nameserver.controller.config import ControllerConfig
from rmq.remoting.acl_guard import acl_home
from rmq.remoting.tls import client_context

__all__ = ["main", "build_parser", "run", "settings_from_args", "controller_config"]

logger = logging.getLogger("rmq.nameserver")

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# option dest -> config key; None values (option not given) leave the file's value
_OPTION_KEYS = {
    "port": "listenPort",
    "host": "bindAddress",
    "broker_expire_ms": "brokerExpiredTimeMillis",
    "scan_interval_ms": "scanNotActiveBrokerInterval",
    "kv_path": "kvConfigPath",
    "accept_standard_json_only": "acceptStandardJsonOnly",
    "order_message_enable": "orderMessageEnable",
    "metrics_port": "metricsPromExporterPort",
    "controller": "enableControllerInNamesrv",
    "controller_master_timeout_ms": "controllerMasterTimeout",
    "log_level": "logLevel",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq namesrv", description="RocketMQ 4.x compatible NameServer")
    p.add_argument(
        "-p", "--port", type=int, default=None, help="listen port, listenPort (default 9876; 0 = any free port)"
    )
    p.add_argument("--host", default=None, help="listen address, bindAddress (default 0.0.0.0)")
    p.add_argument(
        "--broker-expire-ms",
        type=int,
        default=None,
        help="drop a broker not heard from for this long, brokerExpiredTimeMillis (default 120000)",
    )
    p.add_argument(
        "--scan-interval-ms",
        type=int,
        default=None,
        help="broker expiry scan period, scanNotActiveBrokerInterval; the first "
        "scan runs after half of it (default 10000)",
    )
    p.add_argument("--kv-path", default=None, help="KV config file, kvConfigPath (default ~/namesrv/kvConfig.msgpack)")
    p.add_argument(
        "--accept-standard-json-only",
        action="store_const",
        const=True,
        default=None,
        help="answer route data in standard JSON to every client (acceptStandardJsonOnly=true)",
    )
    p.add_argument(
        "--order-message-enable",
        action="store_const",
        const=True,
        default=None,
        help="add orderTopicConf (KV namespace ORDER_TOPIC_CONFIG) to route data (orderMessageEnable=true)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on http://HOST:PORT/metrics, metricsPromExporterPort (default 0: off)",
    )
    p.add_argument(
        "-c",
        "--config",
        default=None,
        metavar="FILE",
        help="namesrv.properties with RocketMQ's keys (listenPort, kvConfigPath, "
        "orderMessageEnable, enableControllerInNamesrv, tls.server.mode, ...)",
    )
    p.add_argument(
        "--controller",
        action="store_const",
        const=True,
        default=None,
        help="run a failover controller here (enableControllerInNamesrv=true): on one NameServer of a "
        "cluster, or on several with controllerEtcdEndpoints in the -c file (one leads through etcd)",
    )
    p.add_argument(
        "--controller-master-timeout-ms",
        type=int,
        default=None,
        help="elect a new master after this much master silence (controllerMasterTimeout, default 10000)",
    )
    p.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logLevel (default INFO)",
    )
    return p


def settings_from_args(args: argparse.Namespace) -> NamesrvSettings:
    """The file of -c with the options given on the command line over it.
    ValueError (PropertiesError) names the file and the bad key or line."""
    overrides = {key: getattr(args, dest) for dest, key in _OPTION_KEYS.items() if getattr(args, dest) is not None}
    return load_namesrv_config(args.config, overrides)


def controller_config(args: argparse.Namespace) -> ControllerConfig | None:
    """The controller's config from -c and the flags; None when it is not enabled."""
    return settings_from_args(args).controller_config


async def run(settings: NamesrvSettings) -> int:
    """Start, wait for SIGINT/SIGTERM, stop. Returns the process exit code."""
    from nameserver.server import NameServer

    cfg, netty, controller = settings.namesrv, settings.netty, settings.controller_config
    host, port = netty.bindAddress, netty.listenPort
    server = NameServer(
        host,
        port,
        settings=settings,  # read live: updateNamesrvConfig changes it
        controller=controller,
        acl_home=acl_home(cfg.rocketmqHome) if cfg.aclEnable else None,
        cluster_credential=cfg.inner_credential,
    )
    # tls.* keys (default: permissive, a self-signed certificate made at start)
    server.remoting.tls = settings.netty.tls
    if server.controller is not None and settings.netty.tls.outbound_tls:
        server.controller.forward_ssl = client_context(settings.netty.tls)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        try:
            await server.start()
        except (OSError, ValueError) as e:  # port taken / bad address, unreadable KV or ACL file
            logger.error("NameServer cannot start on %s:%d: %s", host, port, e)
            return 1
        logger.info("NameServer listening on %s:%d", server.host, server.port)
        metrics = None
        if cfg.metricsPromExporterPort:
            from nameserver.metrics import NameServerMetrics

            shown = server.host if server.host not in ("0.0.0.0", "::", "") else socket.gethostname()
            metrics = server.metrics = NameServerMetrics(server, f"{shown}:{server.port}")
            metrics.start(host, cfg.metricsPromExporterPort)
        if controller is not None:
            logger.info(
                "failover controller on (controllerMasterTimeout %d ms, master lease %d ms, "
                "haSlaveFallbehindMax %d, enableElectUncleanMaster %s, state in %s)",
                controller.controllerMasterTimeout,
                controller.master_lease_ms,
                controller.haSlaveFallbehindMax,
                controller.enableElectUncleanMaster,
                server.controller.store.describe() if server.controller is not None else "-",
            )
        await stop.wait()
        logger.info("NameServer shutting down")
        if metrics is not None:
            await metrics.stop()
        await server.stop()
        return 0
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        root.addHandler(handler)
    # INFO (or the option) while reading the file, so its warnings are seen
    root.setLevel(args.log_level or "INFO")
    try:
        settings = settings_from_args(args)
    except ValueError as e:
        logger.error("NameServer config%s: %s", f" {args.config}" if args.config else "", e)
        return 2
    root.setLevel(settings.namesrv.logLevel)
    # httpx logs every etcd request at INFO: several a second from each controller
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run(settings))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
