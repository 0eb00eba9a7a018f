"""The `rmq` command: one entry point for every role and tool."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence


def _dev(args: argparse.Namespace) -> int:
    from rmq.dev import run_dev
    return run_dev(args.data)


def _store_check(args: argparse.Namespace) -> int:
    from rmq.store_check import run_store_check
    return run_store_check(args.store, args.commitlog_size, args.cq_size)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq", description="RocketMQ-compatible broker cluster in Python")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("dev", help="run a local cluster under a data directory with a live status line")
    d.add_argument("--data", default="./data", help="data directory (default ./data)")
    d.set_defaults(func=_dev)

    c = sub.add_parser("store-check", help="open a store directory read-only and summarise it")
    c.add_argument("store", help="store root (holds commitlog/, consumequeue/)")
    c.add_argument("--commitlog-size", type=int, default=None,
                   help="CommitLog file size (default: the size of the files found)")
    c.add_argument("--cq-size", type=int, default=None, help="ConsumeQueue file size")
    c.set_defaults(func=_store_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
