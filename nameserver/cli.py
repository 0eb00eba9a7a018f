"""``rmq namesrv``: run one NameServer until SIGINT/SIGTERM.

``main(argv)`` takes the arguments after ``namesrv``. Once the socket is bound it
logs ``NameServer listening on HOST:PORT`` (stderr), so ``-p 0`` is usable by a
supervisor or a test that reads the port from that line.

``-c FILE`` reads a namesrv.properties (``key=value``, ``#`` comments) with the failover
controller's keys (``nameserver.controller.ControllerConfig``):
``enableControllerInNamesrv``, ``controllerMasterTimeout``, ``haSlaveFallbehindMax``,
``enableElectUncleanMaster``, ``controllerScanInterval``. ``--controller`` is
``enableControllerInNamesrv=true``; flags win over the file.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from typing import Sequence

from nameserver.controller import ControllerConfig
from nameserver.routes import BROKER_CHANNEL_EXPIRED_TIME_MS

__all__ = ["main", "build_parser", "run"]

logger = logging.getLogger("rmq.nameserver")

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq namesrv",
                                description="RocketMQ 4.x compatible NameServer")
    p.add_argument("-p", "--port", type=int, default=9876,
                   help="listen port (default 9876; 0 = any free port)")
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument("--broker-expire-ms", type=int, default=BROKER_CHANNEL_EXPIRED_TIME_MS,
                   help="drop a broker not heard from for this long (default 120000)")
    p.add_argument("--scan-interval-ms", type=int, default=10_000,
                   help="broker expiry scan period; the first scan runs after half of it "
                        "(default 10000)")
    p.add_argument("--kv-path", default=None,
                   help="KV config file (default ~/namesrv/kvConfig.msgpack)")
    p.add_argument("--accept-standard-json-only", action="store_true",
                   help="answer route data in standard JSON to every client")
    p.add_argument("--order-message-enable", action="store_true",
                   help="add orderTopicConf (KV namespace ORDER_TOPIC_CONFIG) to route data")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on http://HOST:PORT/metrics (default 0: off)")
    p.add_argument("-c", "--config", default=None, metavar="FILE",
                   help="namesrv.properties with controller keys (enableControllerInNamesrv, "
                        "controllerMasterTimeout, haSlaveFallbehindMax, ...)")
    p.add_argument("--controller", action="store_true",
                   help="run the failover controller here (enableControllerInNamesrv=true); "
                        "run it on one NameServer of a cluster only")
    p.add_argument("--controller-master-timeout-ms", type=int, default=None,
                   help="elect a new master after this much master silence "
                        "(controllerMasterTimeout, default 10000)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    return p


def controller_config(args: argparse.Namespace) -> ControllerConfig | None:
    """The controller's config from -c and the flags; None when it is not enabled.
    ValueError names the bad key or line."""
    cfg = ControllerConfig()
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"cannot read {args.config}: {e.strerror}") from None
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                raise ValueError(f"{args.config} line {lineno}: expected key=value")
            current = getattr(cfg, key, None)
            if current is None:
                logger.warning("%s: unknown key %r ignored", args.config, key)
            elif isinstance(current, bool):
                if value.lower() not in ("true", "false"):
                    raise ValueError(f"{args.config}: {key} must be true or false, not {value!r}")
                setattr(cfg, key, value.lower() == "true")
            else:
                try:
                    setattr(cfg, key, int(value))
                except ValueError:
                    raise ValueError(f"{args.config}: {key} must be an integer, "
                                     f"not {value!r}") from None
    if args.controller:
        cfg.enableControllerInNamesrv = True
    if args.controller_master_timeout_ms is not None:
        cfg.controllerMasterTimeout = args.controller_master_timeout_ms
    if not cfg.enableControllerInNamesrv:
        return None
    cfg.validate()
    return cfg


async def run(args: argparse.Namespace) -> int:
    """Start, wait for SIGINT/SIGTERM, stop. Returns the process exit code."""
    from nameserver.server import NameServer

    try:
        controller = controller_config(args)
    except ValueError as e:
        logger.error("NameServer config: %s", e)
        return 2
    server = NameServer(args.host, args.port, broker_expire_ms=args.broker_expire_ms,
                        scan_interval_ms=args.scan_interval_ms, kv_path=args.kv_path,
                        accept_standard_json_only=args.accept_standard_json_only,
                        order_message_enable=args.order_message_enable,
                        controller=controller)
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
        except (OSError, ValueError) as e:   # port taken / bad address, unreadable KV file
            logger.error("NameServer cannot start on %s:%d: %s", args.host, args.port, e)
            return 1
        logger.info("NameServer listening on %s:%d", server.host, server.port)
        if args.metrics_port:
            from nameserver.metrics import NameServerMetrics
            host = server.host if server.host not in ("0.0.0.0", "::", "") else socket.gethostname()
            server.metrics = NameServerMetrics(server, f"{host}:{server.port}")
            server.metrics.start(args.host, args.metrics_port)
        if controller is not None:
            logger.info("failover controller on (controllerMasterTimeout %d ms, "
                        "haSlaveFallbehindMax %d, enableElectUncleanMaster %s)",
                        controller.controllerMasterTimeout, controller.haSlaveFallbehindMax,
                        controller.enableElectUncleanMaster)
        await stop.wait()
        logger.info("NameServer shutting down")
        if server.metrics is not None:
            await server.metrics.stop()
        await server.stop()
        return 0
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.metrics_port < 65536:
        parser.error(f"--metrics-port {args.metrics_port}: not a TCP port (0 = off)")
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(args.log_level)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run(args))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
