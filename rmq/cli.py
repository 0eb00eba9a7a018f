"""The `rmq` command: one entry point for every role and tool."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence


def _dev(args: argparse.Namespace) -> int:
    from rmq.dev import run_dev

    return run_dev(args.data)


def _store_check(args: argparse.Namespace) -> int:
    from rmq.store_check import run_store_check

    return run_store_check(args.store, args.commitlog_size, args.cq_size)


# Subcommands that parse their own flags (flags may follow the subcommand freely):
# name -> (module, its main taking the remaining argv, help). Imported only when run.
_PASSTHROUGH: dict[str, tuple[str, str, str]] = {
    "namesrv": ("nameserver.cli", "main", "run a NameServer (rmq namesrv [-p 9876])"),
    "broker": ("rmq.broker.cli", "main", "run a broker (rmq broker -c broker.conf [-n addr])"),
    "proxy": (
        "rmq.proxy.server",
        "main",
        "run the RocketMQ 5.x gRPC endpoint for 5.x clients (rmq proxy -n addr [-p 8081] [-c FILE])",
    ),
    "produce": ("rmq.client.tools", "produce_main", "send messages (rmq produce -t TOPIC [-n N] [--body ...])"),
    "consume": ("rmq.client.tools", "consume_main", "consume a topic (rmq consume -t TOPIC -g GROUP)"),
    "admin": ("rmq.admin", "main", "mqadmin-style administration (rmq admin help)"),
    "rebuild-cq": (
        "spark.rebuild_consume_queue",
        "main",
        "rebuild ConsumeQueues (and the index) from a store's CommitLog with Spark "
        "(rmq rebuild-cq --store DIR --out DIR)",
    ),
}


def _passthrough(args: argparse.Namespace) -> int:
    module, name, _ = _PASSTHROUGH[args.command]
    run: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
    return run(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq", description="RocketMQ-compatible broker cluster in Python")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    for name, (_, _, help_) in _PASSTHROUGH.items():
        sp = sub.add_parser(name, help=help_, add_help=False)
        sp.add_argument("rest", nargs=argparse.REMAINDER)
        sp.set_defaults(func=_passthrough)

    d = sub.add_parser("dev", help="run a local cluster under a data directory with a live status line")
    d.add_argument("--data", default="./data", help="data directory (default ./data)")
    d.set_defaults(func=_dev)

    c = sub.add_parser("store-check", help="open a store directory read-only and summarise it")
    c.add_argument("store", help="store root (holds commitlog/, consumequeue/)")
    c.add_argument(
        "--commitlog-size", type=int, default=None, help="CommitLog file size (default: the size of the files found)"
    )
    c.add_argument("--cq-size", type=int, default=None, help="ConsumeQueue file size")
    c.set_defaults(func=_store_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _PASSTHROUGH:
        try:
            return _passthrough(argparse.Namespace(command=argv[0], rest=argv[1:]))
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
