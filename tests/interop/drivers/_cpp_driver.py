"""Shared code of the C++-client drivers (``cpp1_*.py``, ``cpp2_*.py``).

Both PyPI bindings expose the same Python API (module ``rocketmq.client``), so
one implementation serves both; each thin script names the flavour it expects
and refuses to run under the other venv:

* ``cpp2``: PyPI ``rocketmq-python-cvs==2.1.0.3`` (C++ client 2.1.0), venv
  ``.venv-interop-cpp2``;
* ``cpp1``: PyPI ``rocketmq==0.4.4`` (C++ client 1.2.x), venv ``.venv-interop-cpp1``.

Output contract (all drivers, C++ and Node): stdout carries ONLY JSON lines;
anything the native library prints is moved to stderr (fd 1 is redirected at
start-up). Events: ``started``, ``sent`` / ``send_error`` (producer),
``message`` (consumers), ``summary`` (last line), ``fatal`` (then exit 2).

Binding limits worth knowing (both versions):

* bodies are C strings: the binding cuts a body at its first NUL byte, both on
  send (``SetMessageBody``) and on receive (``GetMessageBody``) -> use text;
* received messages expose no property enumeration, only ``GetMessageProperty``
  by name: the consumer prints the well-known names below plus ``--property-keys``;
* ``SendResult`` has only status, msgId (the client's UNIQ_KEY) and the queue
  offset; the queue id and offsetMsgId are not exposed;
* ``PushConsumer.shutdown()`` / the destructors can segfault: the consumers end
  with ``os._exit`` after printing their summary (SIGTERM/SIGINT or
  ``--max-messages``/``--idle-exit``), never through ``shutdown()``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import NoReturn, TextIO

# Properties the consumer always asks for (MessageConst names, spec 3.4).
WELL_KNOWN_PROPS = (
    "UNIQ_KEY",
    "TAGS",
    "KEYS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "TRAN_MSG",
    "PGROUP",
    "__SHARDINGKEY",
    "MSG_REGION",
    "TRACE_ON",
    "CONSUME_START_TIME",
    "CLUSTER",
)

_DIST = {"cpp2": "rocketmq-python-cvs", "cpp1": "rocketmq"}

_out: TextIO | None = None
_out_lock = threading.Lock()


def _setup_stdout() -> None:
    """Keep fd 1 for our JSON lines only; native code's stdout goes to stderr."""
    global _out
    if _out is not None:
        return
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)
    _out = os.fdopen(json_fd, "w", buffering=1, encoding="utf-8")
    sys.stdout = sys.stderr


def _json_out() -> TextIO:
    assert _out is not None, "_setup_stdout() first"
    return _out


def emit(**rec) -> None:
    line = json.dumps(rec, ensure_ascii=False)
    with _out_lock:
        _json_out().write(line + "\n")
        _json_out().flush()


def fatal(msg: str, code: int = 2) -> NoReturn:
    emit(event="fatal", error=msg)
    sys.stderr.write(f"error: {msg}\n")
    sys.stderr.flush()
    os._exit(code)


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def load_client(flavor: str, log_dir: str | None, log_level: str):
    """Import the binding after pointing the C++ client's log files at log_dir."""
    log_dir = log_dir or os.environ.get("RMQ_INTEROP_LOG_DIR") or tempfile.mkdtemp(prefix=f"rmq-interop-{flavor}-")
    os.makedirs(log_dir, exist_ok=True)
    # The C++ clients write ~/logs/rocketmq-cpp (1.x) or ~/logs/rocketmq-client
    # (2.x) and, for broadcasting consumers, ~/.rocketmq_offsets: keep them out of
    # the real home directory.
    os.environ["HOME"] = log_dir
    os.environ["ROCKETMQ_CLIENT_LOG_DIR"] = log_dir
    try:
        from importlib import metadata

        dist = _DIST[flavor]
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            fatal(
                f"{flavor} driver needs PyPI package {dist!r} (run it with "
                f".venv-interop-{flavor}/bin/python; scripts/install_test_deps.sh builds it)"
            )
        import rocketmq.client as client
        from rocketmq.ffi import dll
    except ImportError as e:
        fatal(f"cannot load the RocketMQ C++ binding ({flavor}): {e}")
    return client, dll, version, log_dir


def _apply_log_settings(dll, kind: str, handle, log_dir: str, level: str) -> None:
    levels = {"fatal": 1, "error": 2, "warn": 3, "info": 4, "debug": 5, "trace": 6}
    try:
        getattr(dll, f"Set{kind}LogPath")(handle, log_dir.encode())
        getattr(dll, f"Set{kind}LogLevel")(handle, levels[level])
    except (AttributeError, KeyError):
        pass


def _parse_props(s: str | None) -> dict[str, str]:
    out = {}
    for part in (s or "").split(","):
        if not part:
            continue
        if "=" not in part:
            raise SystemExit(f"--props: {part!r} is not k=v")
        k, v = part.split("=", 1)
        out[k] = v
    return out


def _common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namesrv", required=True, help="NameServer address host:port[;host:port]")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--log-dir", help="C++ client log directory (default: a new temp dir, or $RMQ_INTEROP_LOG_DIR)")
    p.add_argument("--log-level", default="info", choices=["fatal", "error", "warn", "info", "debug", "trace"])
    p.add_argument("--instance-name", help="client instance name (push consumer only)")
    p.add_argument("--access-key", help="ACL: sign every request (set_session_credentials) with this AccessKey")
    p.add_argument("--secret-key", help="ACL: ... and this SecretKey")


_KINDS = {"producer": "Producer", "push_consumer": "PushConsumer", "pull_consumer": "PullConsumer"}


def _start_client(role: str, make, dll, a: argparse.Namespace, log_dir: str, configure=None):
    """Create the binding's client for ``role`` with ``make()``, point its log at
    ``log_dir``, give it the NameServer list, let ``configure`` set the rest, start it.
    A failure anywhere is fatal (exit 2)."""
    try:
        c = make()
        _apply_log_settings(dll, _KINDS[role], c._handle, log_dir, a.log_level)
        c.set_namesrv_addr(a.namesrv)
        if a.access_key is not None:
            c.set_session_credentials(a.access_key, a.secret_key or "", "ALIYUN")
        if configure is not None:
            configure(c)
        c.start()
    except Exception as e:
        fatal(f"{role.replace('_', ' ')} start failed: {type(e).__name__}: {e}")
    return c


def _emit_started(flavor: str, version: str, role: str, a: argparse.Namespace, log_dir: str, **fields) -> None:
    emit(
        event="started",
        client=flavor,
        package_version=version,
        role=role,
        group=a.group,
        topic=a.topic,
        namesrv=a.namesrv,
        log_dir=log_dir,
        pid=os.getpid(),
        **fields,
    )


# --------------------------------------------------------------------------- producer
def producer_main(flavor: str, argv=None) -> int:
    _setup_stdout()
    p = argparse.ArgumentParser(description=f"RocketMQ C++ client ({flavor}) producer driver")
    _common_args(p)
    p.add_argument("-n", "--count", type=int, default=1, help="messages to send")
    p.add_argument("--start-index", type=int, default=0, help="first message index i")
    p.add_argument("--tags", help="tag, or comma-separated tags used round-robin")
    p.add_argument("--keys-prefix", help="keys = PREFIX + i")
    p.add_argument("--props", help="user properties k=v,k2=v2 on every message")
    p.add_argument("--body-prefix", default="body-", help="body = PREFIX + i (text only)")
    p.add_argument("--orderly", action="store_true", help="send_orderly (queue = arg %% queues)")
    p.add_argument("--sharding-key-mod", type=int, default=1, help="with --orderly: selector arg = i %% K")
    p.add_argument("--timeout-ms", type=int, default=3000, help="send timeout")
    p.add_argument("--interval-ms", type=int, default=0, help="pause between sends")
    p.add_argument(
        "--keep-going", action="store_true", help="keep sending after a failed send (exit status is still 1)"
    )
    a = p.parse_args(argv)

    client, dll, version, log_dir = load_client(flavor, a.log_dir, a.log_level)
    props = _parse_props(a.props)
    tags = a.tags.split(",") if a.tags else []
    prod = _start_client("producer", lambda: client.Producer(a.group, timeout=a.timeout_ms), dll, a, log_dir)
    _emit_started(flavor, version, "producer", a, log_dir)

    sent = failed = 0
    t0 = time.time()
    for i in range(a.start_index, a.start_index + a.count):
        body = f"{a.body_prefix}{i}"
        msg = client.Message(a.topic)
        tag = tags[i % len(tags)] if tags else None
        keys = f"{a.keys_prefix}{i}" if a.keys_prefix is not None else None
        if tag:
            msg.set_tags(tag)
        if keys:
            msg.set_keys(keys)
        for k, v in props.items():
            msg.set_property(k, v)
        msg.set_body(body)
        rec = {"i": i, "body": body, "tags": tag, "keys": keys}
        try:
            if a.orderly:
                arg = i % max(1, a.sharding_key_mod)
                res = prod.send_orderly(msg, arg)
                rec["selector_arg"] = arg
            else:
                res = prod.send_sync(msg)
            status = getattr(res.status, "name", str(res.status))
            emit(event="sent", status=status, msg_id=res.msg_id, queue_offset=res.offset, **rec)
            sent += 1
        except Exception as e:
            failed += 1
            emit(event="send_error", error=f"{type(e).__name__}: {e}", **rec)
            if not a.keep_going:
                break
        if a.interval_ms:
            time.sleep(a.interval_ms / 1000)
    emit(
        event="summary",
        client=flavor,
        role="producer",
        sent=sent,
        failed=failed,
        requested=a.count,
        elapsed_s=round(time.time() - t0, 3),
    )
    # Producer.shutdown() is safe in practice, but the destructors of the C++
    # singletons are not always: leave without running them.
    try:
        prod.shutdown()
    except Exception:
        pass
    _json_out().flush()
    os._exit(0 if failed == 0 and sent == a.count else 1)


# --------------------------------------------------------------------------- consumers
def _message_record(m, extra_keys) -> dict:
    props = {}
    for k in list(WELL_KNOWN_PROPS) + list(extra_keys):
        v = _text(m.get_property(k))
        if v:
            props[k] = v
    return {
        "topic": _text(m.topic),
        "tags": _text(m.tags),
        "keys": _text(m.keys),
        "body": _text(m.body),
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": _text(m.id),
        "reconsume_times": m.reconsume_times,
        "commit_log_offset": m.commit_log_offset,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "store_size": m.store_size,
        "delay_time_level": m.delay_time_level,
        "properties": props,
    }


class _Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received = 0
        self.retried = 0
        self.last = time.time()


def _install_exit(flavor: str, role: str, counter: _Counter, t0: float) -> Callable[[str], None]:
    done = threading.Event()

    def finish(reason: str) -> None:
        if done.is_set():
            return
        done.set()
        with counter.lock:
            emit(
                event="summary",
                client=flavor,
                role=role,
                received=counter.received,
                reconsume_later=counter.retried,
                reason=reason,
                elapsed_s=round(time.time() - t0, 3),
            )
        _json_out().flush()
        os._exit(0)  # never shutdown(): it segfaults in these bindings

    def on_signal(signum, frame):
        finish(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return finish


class _ConsumerRun:
    """What both consumer drivers hold: the loaded binding, the extra property names to
    print, the counter and the exit path (summary line, then ``os._exit``)."""

    def __init__(self, flavor: str, role: str, a: argparse.Namespace) -> None:
        self.flavor, self.role, self.args = flavor, role, a
        self.client, self.dll, self.version, self.log_dir = load_client(flavor, a.log_dir, a.log_level)
        self.extra = [k for k in a.property_keys.split(",") if k]
        self.counter = _Counter()
        self.t0 = time.time()
        self.finish = _install_exit(flavor, role, self.counter, self.t0)

    def start(self, make, configure=None, **started_fields):
        """Start the consumer (fatal on failure) and print the ``started`` line."""
        a = self.args
        cons = _start_client(self.role, make, self.dll, a, self.log_dir, configure)
        # held until exit: a collected PushConsumer frees its callback trampoline and stops
        self.consumer = cons
        _emit_started(self.flavor, self.version, self.role, a, self.log_dir, expression=a.expression, **started_fields)
        return cons


def _subscribe(client, dll, cons, topic: str, expression: str, orderly: bool, handler) -> None:
    """PushConsumer.subscribe without the binding's callback wrapper.

    The binding's wrapper re-raises the handler's exception from a ``finally``
    block, so ctypes swallows it and the C++ side reads 0 = CONSUME_SUCCESS:
    RECONSUME_LATER is unreachable through it. Here the handler returns True
    for RECONSUME_LATER (1), False for CONSUME_SUCCESS (0).
    """
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import MSG_CALLBACK_FUNC

    def _on_message(_consumer, msg):
        try:
            return 1 if handler(client.RecvMessage(msg)) else 0
        except BaseException as e:  # never let an exception cross into C++
            try:
                emit(event="callback_error", error=f"{type(e).__name__}: {e}")
            except Exception:
                pass
            return 1

    ffi_check(dll.Subscribe(cons._handle, topic.encode(), expression.encode()))
    func = MSG_CALLBACK_FUNC(_on_message)
    cons._callback_refs.append(func)  # keep the trampoline alive
    register = dll.RegisterMessageCallbackOrderly if orderly else dll.RegisterMessageCallback
    ffi_check(register(cons._handle, func))


def push_main(flavor: str, argv=None) -> int:
    _setup_stdout()
    p = argparse.ArgumentParser(description=f"RocketMQ C++ client ({flavor}) push consumer driver")
    _common_args(p)
    p.add_argument("--expression", default="*", help="tag expression, e.g. '*' or 'a || b'")
    p.add_argument("--orderly", action="store_true", help="orderly listener (locks queues)")
    p.add_argument("--broadcast", action="store_true", help="BROADCASTING message model")
    p.add_argument("--property-keys", default="", help="extra property names to print (comma-separated)")
    p.add_argument("--thread-count", type=int, default=0, help="consume threads (0 = default)")
    p.add_argument(
        "--reconsume-until", type=int, default=0, help="answer RECONSUME_LATER while reconsume_times < N (retry tests)"
    )
    p.add_argument("--max-messages", type=int, default=0, help="exit 0 after N messages")
    p.add_argument(
        "--idle-exit", type=float, default=0, help="exit 0 after N seconds without a message (0 = run until killed)"
    )
    a = p.parse_args(argv)

    run = _ConsumerRun(flavor, "push_consumer", a)
    client, counter, finish = run.client, run.counter, run.finish

    def on_message(m) -> None:
        try:
            rec = _message_record(m, run.extra)
        except Exception as e:  # report, but never raise into the C++ thread for this
            emit(event="decode_error", error=f"{type(e).__name__}: {e}")
            return
        retry = rec["reconsume_times"] < a.reconsume_until
        with counter.lock:
            counter.last = time.time()
            if retry:
                counter.retried += 1
            else:
                counter.received += 1
            n = counter.received
        emit(event="message", action="RECONSUME_LATER" if retry else "CONSUME_SUCCESS", **rec)
        if a.max_messages and n >= a.max_messages and not retry:
            threading.Thread(target=finish, args=("max_messages",), daemon=True).start()
        return retry

    try:
        model = client.MessageModel.BROADCASTING if a.broadcast else client.MessageModel.CLUSTERING
    except AttributeError:
        from rocketmq.ffi import MessageModel

        model = MessageModel.BROADCASTING if a.broadcast else MessageModel.CLUSTERING

    def configure(cons) -> None:
        if a.instance_name:
            cons.set_instance_name(a.instance_name)
        if a.thread_count:
            cons.set_thread_count(a.thread_count)
        _subscribe(client, run.dll, cons, a.topic, a.expression, a.orderly, on_message)

    run.start(
        lambda: client.PushConsumer(a.group, orderly=a.orderly, message_model=model),
        configure,
        orderly=a.orderly,
        broadcast=a.broadcast,
    )

    while True:
        time.sleep(0.2)
        if a.idle_exit and time.time() - counter.last > a.idle_exit:
            finish("idle_exit")


def pull_main(flavor: str, argv=None) -> int:
    _setup_stdout()
    p = argparse.ArgumentParser(description=f"RocketMQ C++ client ({flavor}) pull consumer driver")
    _common_args(p)
    p.add_argument("--expression", default="*")
    p.add_argument("--property-keys", default="")
    p.add_argument("--max-messages", type=int, default=0, help="stop after N messages")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="stop after N seconds (exit 0 if --max-messages is 0, else 1)"
    )
    p.add_argument("--max-num", type=int, default=32, help="messages per pull request")
    a = p.parse_args(argv)

    run = _ConsumerRun(flavor, "pull_consumer", a)
    counter, finish, t0 = run.counter, run.finish, run.t0
    cons = run.start(lambda: run.client.PullConsumer(a.group))
    # PullConsumer.pull() walks every queue from the offsets it keeps in memory
    # (starting at 0) until each reports NO_NEW_MSG; call it in rounds.
    while time.time() - t0 < a.timeout:
        try:
            for m in cons.pull(a.topic, a.expression, a.max_num):
                rec = _message_record(m, run.extra)
                with counter.lock:
                    counter.received += 1
                    n = counter.received
                emit(event="message", **rec)
                if a.max_messages and n >= a.max_messages:
                    finish("max_messages")
        except Exception as e:
            emit(event="pull_error", error=f"{type(e).__name__}: {e}")
        time.sleep(0.2)
    if a.max_messages:
        with counter.lock:
            emit(
                event="summary",
                client=flavor,
                role="pull_consumer",
                received=counter.received,
                reason="timeout",
                elapsed_s=round(time.time() - t0, 3),
            )
        _json_out().flush()
        os._exit(1)
    finish("timeout")
    return 0  # finish returns only while another thread is already exiting
