"""What every ``rmq admin`` subcommand is made of: options, the command class, output.

A subcommand is a ``Command`` subclass registered with ``@register``: a ``name`` (as
mqadmin spells it), a ``help`` line, its ``options`` and ``async def run(admin, args,
out)``. ``TopicRoute`` in ``rmq/admin/commands/topic.py`` is the smallest whole one.

The framework (``rmq.admin.main``) builds the argparse parser from ``options`` (plus the
common ``-n``, ``--json``, ``--timeout`` and ``-h``), opens one ``MQAdmin`` for the run,
calls ``validate`` then ``run``, and turns failures into the one error path: an
``AdminError`` (or a remoting / broker error) becomes ``rmq admin <cmd>: <message>``
on stderr and exit status 1; a usage problem (``parser.error``/``UsageError``) is
argparse's message and status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, TextIO, TypeVar

from rmq.admin.errors import AdminError, UsageError
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.remoting.errors import RemotingError

if TYPE_CHECKING:
    from rmq.admin.admin import MQAdmin

__all__ = [
    "AdminError",
    "UsageError",
    "Opt",
    "Command",
    "Output",
    "register",
    "COMMANDS",
    "find_command",
    "NAMESRV",
    "TOPIC",
    "BROKER_ADDR",
    "CLUSTER",
    "GROUP",
    "MSG_ID",
    "MSG_KEY",
    "java_bool",
    "describe_error",
    "broker_or_cluster",
    "each_broker",
    "emit_properties",
    "OnBrokers",
]


def describe_error(e: BaseException) -> str:
    """One line for anything a command can fail with."""
    if isinstance(e, AdminError):
        text = str(e)
    elif isinstance(e, MQBrokerError):
        who = f"broker {e.broker_addr}" if e.broker_addr else "NameServer"
        remark = f": {e.remark}" if e.remark else ""
        text = f"{who} answered {ResponseCode.name_of(e.code)} ({e.code}){remark}"
    elif isinstance(e, (MQClientError, RemotingError)):
        text = str(e) or type(e).__name__
    elif isinstance(e, ProtocolError):
        text = f"malformed response: {e}"
    elif isinstance(e, asyncio.TimeoutError):
        text = "timed out"
    else:
        text = f"internal error: {type(e).__name__}: {e}"
    return " ".join(text.split())


# =========================================================================== options
@dataclass(frozen=True)
class Opt:
    """One mqadmin option: ``-<short>`` / ``--<long>``; ``args.<long>`` holds the value.

    ``arg=False`` makes a switch (store_true). ``type`` converts the value (argparse
    reports a bad one as a usage error).
    """

    short: str
    long: str
    help: str
    arg: bool = True
    required: bool = False
    type: Callable[[str], Any] = str
    default: Any = None
    metavar: str | None = None

    def but(self, **changes: Any) -> Opt:
        """A copy with some fields changed (``TOPIC.but(required=True)``)."""
        return replace(self, **changes)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        names = [f"-{self.short}", f"--{self.long}"] if self.short else [f"--{self.long}"]
        if not self.arg:
            parser.add_argument(*names, dest=self.long, action="store_true", help=self.help)
            return
        parser.add_argument(
            *names,
            dest=self.long,
            required=self.required,
            type=self.type,
            default=self.default,
            help=self.help,
            metavar=self.metavar or self.long.upper(),
        )


def broker_or_cluster(args: argparse.Namespace) -> None:
    """The -b / -c pair most broker commands take: exactly one of them."""
    if bool(args.brokerAddr) == bool(args.clusterName):
        raise UsageError("exactly one of -b/--brokerAddr or -c/--clusterName is required")


_T = TypeVar("_T")


async def each_broker(
    out: Output,
    addrs: Sequence[str],
    call: Callable[[str], Awaitable[_T]],
    *,
    alone_raises: bool = False,
    what: str = "broker",
) -> AsyncIterator[tuple[str, _T]]:
    """``call(addr)`` on each server (``what``: a broker, a NameServer) in turn, yielding
    the answers. One that fails is reported (``out.error``: exit status 1) and the others
    still run; with ``alone_raises`` the failure of the only one asked is raised instead."""
    for addr in addrs:
        try:
            result = await call(addr)
        except Exception as e:
            if alone_raises and len(addrs) == 1:
                raise
            out.error(f"{what} {addr}: {describe_error(e)}")
            continue
        yield addr, result


async def emit_properties(
    out: Output,
    titles: dict[str, str | None],
    fetch: Callable[[str], Awaitable[dict[str, str]]],
    line: Callable[[str, str, str], str],
    *,
    blank_after: bool = False,
    alone_raises: bool = False,
    what: str = "broker",
) -> None:
    """Each server's key/value properties (runtime info, config), asked with ``fetch``:
    its title line (if any), one ``line(addr, key, value)`` per key in key order; the
    document maps each address to its sorted properties."""
    doc: dict[str, dict[str, str]] = {}
    lines: list[str] = []
    async for addr, props in each_broker(out, list(titles), fetch, alone_raises=alone_raises, what=what):
        title = titles[addr]
        if title:
            lines.append(title)
        lines += [line(addr, k, props[k]) for k in sorted(props)]
        if blank_after:
            lines.append("")
        doc[addr] = dict(sorted(props.items()))
    out.emit(text="\n".join(lines), data=doc)


def java_bool(text: str) -> bool:
    """``true``/``false`` (any case), as mqadmin's ``-o true``; anything else is a usage error."""
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return t == "true"


# mqadmin's letters. A command takes the ones it needs and adjusts them with ``but``;
# the same letter keeps the same meaning across commands wherever mqadmin does so.
NAMESRV = Opt(
    "n",
    "namesrvAddr",
    "Name server address list, eg: 192.168.0.1:9876;192.168.0.2:9876 (default: $NAMESRV_ADDR, else 127.0.0.1:9876)",
    metavar="ADDR",
)
TOPIC = Opt("t", "topic", "topic name")
BROKER_ADDR = Opt("b", "brokerAddr", "broker address (ip:port)", metavar="ADDR")
CLUSTER = Opt("c", "clusterName", "cluster name", metavar="CLUSTER")
GROUP = Opt("g", "consumerGroup", "consumer group name", metavar="GROUP")
MSG_ID = Opt("i", "msgId", "message id", metavar="ID")
MSG_KEY = Opt("k", "msgKey", "message key", metavar="KEY")


# =========================================================================== commands
class Command:
    """Base of every subcommand. Class attributes describe it; ``run`` does it."""

    name: ClassVar[str]
    help: ClassVar[str]
    options: ClassVar[tuple[Opt, ...]] = ()
    #: Longer text for ``rmq admin help <cmd>`` (below the usage line).
    description: ClassVar[str | None] = None

    def validate(self, args: argparse.Namespace) -> None:
        """Cross-option checks; raise ``UsageError`` (e.g. "one of -b or -c is required")."""

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        raise NotImplementedError


class OnBrokers(Command):
    """A command for -b's broker or for the brokers of -c's cluster (exactly one of the
    two): its masters, or with ``with_slaves`` its masters and slaves."""

    with_slaves: ClassVar[bool] = False

    def validate(self, args: argparse.Namespace) -> None:
        broker_or_cluster(args)

    async def targets(self, admin: MQAdmin, args: argparse.Namespace) -> list[str]:
        if args.brokerAddr:
            return [args.brokerAddr.strip()]
        cluster = args.clusterName.strip()
        if self.with_slaves:
            return await admin.fetch_master_and_slave_addr_by_cluster_name(cluster)
        return await admin.fetch_master_addr_by_cluster_name(cluster)


#: name -> command class, in registration order.
COMMANDS: dict[str, type[Command]] = {}


def register(cls: type[Command]) -> type[Command]:
    """Class decorator: make ``cls`` an ``rmq admin`` subcommand."""
    key = cls.name.lower()
    if key in {k.lower() for k in COMMANDS}:
        raise ValueError(f"admin command {cls.name} registered twice")
    COMMANDS[cls.name] = cls
    return cls


def find_command(name: str) -> type[Command] | None:
    """mqadmin matches command names case-insensitively."""
    for n, cls in COMMANDS.items():
        if n.lower() == name.lower():
            return cls
    return None


# =========================================================================== output
class Output:
    """Where a command's results go: a text rendering or, with ``--json``, a document.

    ``emit`` prints one result (commands that repeat, like ``clusterList -i``, emit
    several). ``error`` records a failure that does not stop the command (one broker of
    a cluster not answering): the line goes to stderr now and the exit status becomes 1.
    ``warn`` is the same line without changing the exit status.
    """

    def __init__(
        self, command: str, json_mode: bool, stdout: TextIO | None = None, stderr: TextIO | None = None
    ) -> None:
        self.command = command
        self.json = json_mode
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.failed = False

    def emit(self, text: str | None = None, data: Any = None) -> None:
        if self.json:
            self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        elif text:
            self.stdout.write(text if text.endswith("\n") else text + "\n")
        self.stdout.flush()

    def error(self, message: str) -> None:
        self.failed = True
        self.warn(message)

    def warn(self, message: str) -> None:
        self.stderr.write(f"rmq admin {self.command}: {message}\n")
        self.stderr.flush()
