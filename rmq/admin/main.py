"""``rmq admin``: mqadmin's command line over the registered subcommands.

    rmq admin                      list the commands (like ``mqadmin``)
    rmq admin help <command>       the command's flags
    rmq admin <command> [flags]    run it; flags come after the command name

Exit status: 0 success; 1 the command failed (one line on stderr,
``rmq admin <command>: <what went wrong>``); 2 bad usage (argparse's message).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from rmq.admin.admin import DEFAULT_NAMESRV, DEFAULT_TIMEOUT_MS, MQAdmin
from rmq.admin.base import COMMANDS, NAMESRV, Command, Opt, Output, UsageError, describe_error, find_command
from rmq.client.acl import add_credential_options, credentials
from rmq.client.tls import add_tls_options, tls_options
from rmq.remoting.tls import client_context

__all__ = ["main", "build_parser", "NAMESRV_ADDR_ENV"]

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
PROG = "rmq admin"

_JSON = Opt("", "json", "print a JSON document instead of the table", arg=False)
_TIMEOUT = Opt(
    "",
    "timeout",
    f"request timeout in milliseconds (default {DEFAULT_TIMEOUT_MS})",
    type=int,
    default=DEFAULT_TIMEOUT_MS,
    metavar="MS",
)


def _load_commands() -> None:
    import rmq.admin.commands  # noqa: F401  (registers every command)


def build_parser(cls: type[Command]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} {cls.name}", description=cls.description or cls.help)
    for opt in (NAMESRV, *cls.options, _JSON, _TIMEOUT):
        opt.add_to(p)
    add_credential_options(p)
    add_tls_options(p)
    return p


def print_commands(out: TextIO) -> None:
    out.write(f"The most commonly used {PROG} commands are:\n")
    for name in sorted(COMMANDS, key=str.lower):
        out.write(f"   {name:<20} {COMMANDS[name].help}\n")
    out.write(f"\nSee '{PROG} help <command>' for more information on a specific command.\n")


def namesrv_list(flag: str | None) -> list[str]:
    raw = flag if flag else os.environ.get(NAMESRV_ADDR_ENV) or DEFAULT_NAMESRV
    return [a.strip() for a in raw.split(";") if a.strip()]


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    _load_commands()

    if not argv or argv[0] in ("-h", "--help"):
        print_commands(stdout)
        return 0
    if argv[0] == "help":
        if len(argv) == 1:
            print_commands(stdout)
            return 0
        cls = find_command(argv[1])
        if cls is None:
            stderr.write(f"{PROG}: the sub command {argv[1]} not exist; see '{PROG} help'\n")
            return 2
        stdout.write(build_parser(cls).format_help())
        return 0

    cls = find_command(argv[0])
    if cls is None:
        stderr.write(f"{PROG}: the sub command {argv[0]} not exist; see '{PROG} help'\n")
        return 2
    parser = build_parser(cls)
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as e:  # -h (0) or a usage error (2), already printed
        return int(e.code or 0)
    cmd = cls()
    try:
        cmd.validate(args)
    except UsageError as e:
        parser.print_usage(stderr)
        stderr.write(f"{parser.prog}: error: {e}\n")
        return 2
    if args.timeout <= 0:
        parser.print_usage(stderr)
        stderr.write(f"{parser.prog}: error: --timeout must be positive\n")
        return 2

    out = Output(cls.name, args.json, stdout, stderr)

    async def go() -> None:
        access_key, secret_key = credentials(args)
        use_tls, tls = tls_options(args)
        ssl = client_context(tls) if use_tls else None
        async with MQAdmin(namesrv_list(args.namesrvAddr), args.timeout, access_key, secret_key, ssl) as admin:
            admin.client_config.use_tls, admin.client_config.tls = use_tls, tls
            await cmd.run(admin, args, out)

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        raise
    except Exception as e:
        if os.environ.get("RMQ_ADMIN_DEBUG"):
            import traceback

            traceback.print_exc(file=stderr)
        out.error(describe_error(e))
        return 1
    return 1 if out.failed else 0
