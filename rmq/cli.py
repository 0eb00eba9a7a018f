"""The `rmq` command: one entry point for every role and tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


def _dev(args: argparse.Namespace) -> int:
    from rmq.dev import run_dev

    return run_dev(args.data)


def _store_check(args: argparse.Namespace) -> int:
    from rmq.store_check import run_store_check

    return run_store_check(args.store, args.commitlog_size, args.cq_size)


def _namesrv(args: argparse.Namespace) -> int:
    from nameserver.cli import main as namesrv_main

    return namesrv_main(args.rest)


def _broker(args: argparse.Namespace) -> int:
    from rmq.broker.cli import main as broker_main

    return broker_main(args.rest)


def _produce(args: argparse.Namespace) -> int:
    from rmq.client.tools import produce_main

    return produce_main(args.rest)


def _consume(args: argparse.Namespace) -> int:
    from rmq.client.tools import consume_main

    return consume_main(args.rest)


def _admin(args: argparse.Namespace) -> int:
    from rmq.admin import main as admin_main

    return admin_main(args.rest)


def _rebuild_cq(args: argparse.Namespace) -> int:
    from spark.rebuild_consume_queue import main as rebuild_main

    return rebuild_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq", description="RocketMQ-compatible broker cluster in Python")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    n = sub.add_parser("namesrv", help="run a NameServer (rmq namesrv [-p 9876])", add_help=False)
    n.add_argument("rest", nargs=argparse.REMAINDER)
    n.set_defaults(func=_namesrv)

    b = sub.add_parser("broker", help="run a broker (rmq broker -c broker.conf [-n addr])", add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=_broker)

    d = sub.add_parser("dev", help="run a local cluster under a data directory with a live status line")
    d.add_argument("--data", default="./data", help="data directory (default ./data)")
    d.set_defaults(func=_dev)

    pr = sub.add_parser("produce", help="send messages (rmq produce -t TOPIC [-n N] [--body ...])", add_help=False)
    pr.add_argument("rest", nargs=argparse.REMAINDER)
    pr.set_defaults(func=_produce)

    co = sub.add_parser("consume", help="consume a topic (rmq consume -t TOPIC -g GROUP)", add_help=False)
    co.add_argument("rest", nargs=argparse.REMAINDER)
    co.set_defaults(func=_consume)

    ad = sub.add_parser("admin", help="mqadmin-style administration (rmq admin help)", add_help=False)
    ad.add_argument("rest", nargs=argparse.REMAINDER)
    ad.set_defaults(func=_admin)

    rb = sub.add_parser(
        "rebuild-cq",
        help="rebuild ConsumeQueues (and the index) from a store's "
        "CommitLog with Spark (rmq rebuild-cq --store DIR --out DIR)",
        add_help=False,
    )
    rb.add_argument("rest", nargs=argparse.REMAINDER)
    rb.set_defaults(func=_rebuild_cq)

    c = sub.add_parser("store-check", help="open a store directory read-only and summarise it")
    c.add_argument("store", help="store root (holds commitlog/, consumequeue/)")
    c.add_argument(
        "--commitlog-size", type=int, default=None, help="CommitLog file size (default: the size of the files found)"
    )
    c.add_argument("--cq-size", type=int, default=None, help="ConsumeQueue file size")
    c.set_defaults(func=_store_check)
    return p


# Subcommands that parse their own flags (flags may follow the subcommand freely).
_PASSTHROUGH = {
    "namesrv": _namesrv,
    "broker": _broker,
    "produce": _produce,
    "consume": _consume,
    "admin": _admin,
    "rebuild-cq": _rebuild_cq,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _PASSTHROUGH:
        try:
            return _PASSTHROUGH[argv[0]](argparse.Namespace(rest=argv[1:]))
        except KeyboardInterrupt:
            return 130
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
