"""`rmq broker -c broker.conf [-n host:port;host:port]` (mqbroker)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from rmq.auth.acl_config import AclConfigError
from rmq.broker.broker import Broker
from rmq.broker.config import load_broker_config
from rmq.broker.runtime_config import all_config_properties
from rmq.common.logs import start_server_logging
from rmq.common.properties import KeyValueError, key_value_words
from rmq.store.config import ConfigError
from rmq.store.errors import StoreError

log = logging.getLogger("rmq.broker")

SHUTDOWN_GRACE = 10.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq broker", description="run a broker")
    p.add_argument("-c", "--config", help="broker.conf (RocketMQ properties format)")
    p.add_argument("-n", "--namesrv", help="NameServer address list host:port;host:port")
    p.add_argument("-p", "--print-config", action="store_true", help="print the effective config and exit")
    p.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (repeatable)",
    )
    p.add_argument("--log-level", default="INFO")
    return p


async def _run(broker: Broker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except AclConfigError as e:
        # as a bad broker.conf: the operator's file, named with its line
        print(f"rmq broker: bad ACL configuration: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        log.error("broker cannot start: %s", e)
        return 1
    except OSError as e:
        log.error("broker cannot start: %s", e)
        await broker.shutdown()
        return 1
    await stop.wait()
    try:
        await asyncio.wait_for(broker.shutdown(), SHUTDOWN_GRACE)
    except TimeoutError:
        log.error("shutdown took longer than %.0f s; exiting anyway", SHUTDOWN_GRACE)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_server_logging(args.log_level)
    try:
        overrides = key_value_words(args.defines, strip=True)
    except KeyValueError as e:
        print(f"rmq broker: -D {e.word!r}: expected KEY=VALUE", file=sys.stderr)
        return 2
    try:
        loaded = load_broker_config(args.config, args.namesrv, overrides)
    except ConfigError as e:
        print(f"rmq broker: bad configuration: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        # the same view as GET_BROKER_CONFIG: secrets left out
        for key, value in all_config_properties(loaded.broker, loaded.store).items():
            print(f"{key}={value}")
        for key, text in loaded.broker.tls.to_properties().items():  # passwords shown as ******
            print(f"{key}={text}")
        return 0
    broker = Broker(loaded.broker, loaded.store, listen_host=loaded.broker.bindAddress, config_path=args.config)
    try:
        import uvloop

        return uvloop.run(_run(broker))
    except ImportError:
        return asyncio.run(_run(broker))
