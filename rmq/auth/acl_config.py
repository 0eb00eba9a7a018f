"""The plain_acl.yml model (spec 2.1, 2.2): parse and merge the files (codes 50-53 rewrite them:
``rmq.auth.acl_update``).

Files: ``<home>/conf/acl/**/*.yml|*.yaml`` (recursively), then ``<home>/conf/plain_acl.yml``
(the default file) last, as 4.9.8's ``PlainPermissionManager.load`` lists them. 4.9.8
takes the directory listing order (unspecified, file-system dependent); here each
directory is read in name order, so the result does not depend on the file system.

Duplicate accessKey: as 4.9.8, the *first* definition seen wins (in that file order,
and within a file), and every later one is ignored with a warning (``AclSet.warnings``),
so an account in ``conf/acl/`` shadows one of the same key in the default file.

A file that cannot be used raises ``AclConfigError`` naming the file, the line (the YAML
node's mark) and the field. At start that stops the broker; on reload the caller keeps
the previous ``AclSet``. Each load builds a whole new ``AclSet``; nothing is patched in
place, which is what caused 4.9.x's reload bugs (spec 2.8, 6.3).

Parsing is ``yaml.SafeLoader`` (what ``yaml.safe_load`` uses), composed and constructed in
two steps so the node marks stay available for error messages.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import yaml

from rmq.auth.address import AddressPattern, AddressPatternError, compile_pattern
from rmq.auth.cache import BoundedCache
from rmq.auth.decision import Decision
from rmq.auth.signing import SigningKey, SigningOrder
from rmq.common.mixall import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "DENY",
    "ANY",
    "PUB",
    "SUB",
    "parse_perm",
    "java_utf16_len",
    "DEFAULT_ACL_FILE",
    "ACL_DIR",
    "AclConfigError",
    "DataVersion",
    "Account",
    "AclFile",
    "AclSet",
    "parse_acl_document",
    "build_acl_set",
    "acl_file_paths",
    "acl_file_stamps",
    "load_acl",
]

# Permission bits (ACL/common/Permission.java). ANY is only ever *needed*, never owned.
DENY: Final = 1
ANY: Final = 2
PUB: Final = 4
SUB: Final = 8

_PERMS: Final[Mapping[str, int]] = MappingProxyType(
    {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
)

DEFAULT_ACL_FILE: Final = "conf/plain_acl.yml"  # -Drocketmq.acl.plain.file's default
ACL_DIR: Final = "conf/acl"
_MIN_KEY_LENGTH: Final = 7  # AclConstants: "length <= 6 -> error"

K_GLOBAL_WHITE: Final = "globalWhiteRemoteAddresses"
K_ACCOUNTS: Final = "accounts"
K_DATA_VERSION: Final = "dataVersion"
K_ACCESS_KEY: Final = "accessKey"
K_SECRET_KEY: Final = "secretKey"
K_WHITE: Final = "whiteRemoteAddress"
K_ADMIN: Final = "admin"
K_DEFAULT_TOPIC: Final = "defaultTopicPerm"
K_DEFAULT_GROUP: Final = "defaultGroupPerm"
K_TOPIC_PERMS: Final = "topicPerms"
K_GROUP_PERMS: Final = "groupPerms"

# Memo bounds (rmq.auth.cache): peer hosts per white list, verdicts per account.
HOST_MEMO: Final = 1024
DECISION_MEMO: Final = 4096

#: (request code, the needed resources and perms in insertion order) -> verdict
DecisionKey = tuple[int, tuple[tuple[str, int], ...]]


def parse_perm(text: str | None) -> int:
    """``Permission.parsePermFromString``: anything but PUB / SUB / PUB|SUB / SUB|PUB is DENY."""
    if text is None:
        return DENY
    return _PERMS.get(text.strip(), DENY)


def java_utf16_len(text: str) -> int:
    """``String.length()``: UTF-16 code units (an astral character counts 2)."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


# =========================================================================== errors
class AclConfigError(ValueError):
    """A file that cannot be loaded: ``path:line: field: problem``."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


# =========================================================================== model
@dataclass(frozen=True, slots=True)
class DataVersion:
    """``DataVersion`` of one file (its ``dataVersion[0]``), bumped by every rewrite."""

    counter: int = 0
    timestamp: int = 0

    def to_json(self) -> str:
        """fastjson's rendering (properties in alphabetical order), as code 52 answers it."""
        return f'{{"counter":{self.counter},"timestamp":{self.timestamp}}}'

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(self.counter + 1, now_ms)


@dataclass(frozen=True, slots=True)
class Account:
    """One ``accounts`` entry, ready for ``validate``. The secret is kept out of ``repr``."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    # Topics by name and groups as %RETRY%<group>, in one map as 4.9.8 keeps them
    # (groupPerms first, so a topicPerms entry of the same name wins).
    resource_perms: Mapping[str, int]
    path: str
    # the secret's HMAC states, made once per load (signing.SigningKey)
    signing_key: SigningKey = field(init=False, repr=False, compare=False)
    # Memos of what permissions.validate derives from this account's fields alone: they
    # go with the account when a reload, a code 50-53 write or a new secret replaces it.
    white_hosts: BoundedCache[str, bool] = field(init=False, repr=False, compare=False)
    # steps 7-11 of spec 2.5 (the signature is checked on every request, before)
    decisions: BoundedCache[DecisionKey, Decision] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signing_key", SigningKey(self.secret_key))
        object.__setattr__(self, "white_hosts", BoundedCache(HOST_MEMO))
        object.__setattr__(self, "decisions", BoundedCache(DECISION_MEMO))

    def is_white(self, host: str) -> bool:
        """``whiteRemoteAddress`` covers ``host`` (a range pattern is a regex match and
        int parsing: worth remembering per peer)."""
        pattern = self.white_remote_address
        if pattern.kind == "blank":  # most accounts
            return False
        hit = self.white_hosts.get(host)
        if hit is None:
            hit = self.white_hosts.put(host, pattern.matches(host))
        return hit


@dataclass(frozen=True, slots=True)
class AclFile:
    path: str
    global_white: tuple[AddressPattern, ...]
    accounts: tuple[Account, ...]
    data_version: DataVersion | None
    warnings: tuple[str, ...] = ()


_NO_ACCOUNTS: Final[Mapping[str, Account]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class AclSet:
    """Everything loaded from one scan of the files; replaced whole on reload."""

    files: tuple[AclFile, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=lambda: _NO_ACCOUNTS)
    global_white: tuple[AddressPattern, ...] = ()
    # sha256 over the (path, content) of every file read, in load order: equal
    # fingerprints mean nothing changed, whatever the mtimes say.
    fingerprint: str = ""
    warnings: tuple[str, ...] = ()
    default_file: str | None = None
    # Memos for the request checks, new with every set (rmq.auth.cache): the signing
    # order of each ext key tuple, and which peer hosts the global white list covers.
    signing_order: SigningOrder = field(default_factory=SigningOrder, init=False, repr=False, compare=False)
    white_hosts: BoundedCache[str, bool] = field(
        default_factory=lambda: BoundedCache(HOST_MEMO), init=False, repr=False, compare=False
    )

    def account(self, access_key: str) -> Account | None:
        return self.accounts.get(access_key)

    def file_of(self, access_key: str) -> str | None:
        """The file an account lives in (where code 50 / 51 rewrite it)."""
        acc = self.accounts.get(access_key)
        return None if acc is None else acc.path

    def is_globally_white(self, host: str) -> bool:
        if not self.global_white:
            return False
        hit = self.white_hosts.get(host)
        if hit is None:
            hit = self.white_hosts.put(host, any(pattern.matches(host) for pattern in self.global_white))
        return hit

    def data_versions(self) -> dict[str, DataVersion | None]:
        """path -> dataVersion for code 52's ``allAclFileVersion``."""
        return {f.path: f.data_version for f in self.files}


# =========================================================================== YAML
def _compose(text: str | bytes, path: str) -> tuple[Any, yaml.Node | None]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = None if mark is None else mark.line + 1
        raise AclConfigError(path, line, None, f"not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:  # a reader error: bytes that are no text
        raise AclConfigError(path, None, None, f"not valid YAML: {e}") from None
    finally:
        loader.dispose()
    return data, node


def _line(node: yaml.Node | None, *where: str | int) -> int | None:
    """The 1-based line of the node at ``where`` (or of the deepest existing parent)."""
    if node is None:
        return None
    for step in where:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == step:
                    child = value
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and 0 <= step < len(node.value):
            child = node.value[step]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1


def _text(value: object) -> str | None:
    """A scalar as fastjson turns it into a Java String (``secretKey: 12345678`` -> "12345678")."""
    if value is None or isinstance(value, str):
        return value
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise TypeError(type(value).__name__)


# =========================================================================== one file
def parse_acl_document(text: str | bytes, path: str) -> AclFile:
    """One plain_acl.yml; ``AclConfigError`` (file, line, field) when 4.9.8 would not load it.

    An empty document is a file without data (4.9.8 skips it with a warning).
    """
    data, root = _compose(text, path)
    if data is None or data == {}:
        return AclFile(path, (), (), None, (f"{path}: no data",))
    if not isinstance(data, dict):
        raise AclConfigError(path, _line(root), None, "the document is not a mapping")

    def fail(problem: str, field: str | None, *where: str | int) -> AclConfigError:
        return AclConfigError(path, _line(root, *where), field, problem)

    warnings: list[str] = []

    white: list[AddressPattern] = []
    raw_white = data.get(K_GLOBAL_WHITE)
    if raw_white is not None:
        if not isinstance(raw_white, list):
            raise fail("must be a list of address patterns", K_GLOBAL_WHITE, K_GLOBAL_WHITE)
        for i, item in enumerate(raw_white):
            try:
                white.append(compile_pattern(_text(item)))
            except (AddressPatternError, TypeError) as e:
                raise fail(f"bad address pattern: {e}", f"{K_GLOBAL_WHITE}[{i}]", K_GLOBAL_WHITE, i) from None

    accounts: list[Account] = []
    seen: set[str] = set()
    raw_accounts = data.get(K_ACCOUNTS)
    if raw_accounts is not None:
        if not isinstance(raw_accounts, list):
            raise fail("must be a list of accounts", K_ACCOUNTS, K_ACCOUNTS)
        for i, raw in enumerate(raw_accounts):
            account = _parse_account(raw, path, i, root, warnings)
            if account.access_key in seen:
                warnings.append(f"{path}: accessKey {account.access_key} is defined twice; the first one is used")
                continue
            seen.add(account.access_key)
            accounts.append(account)

    return AclFile(path, tuple(white), tuple(accounts), _data_version(data, fail), tuple(warnings))


def _data_version(data: dict[Any, Any], fail: Any) -> DataVersion | None:
    raw = data.get(K_DATA_VERSION)
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or not isinstance(raw[0], dict):
        raise fail("must be a list of {counter, timestamp}", K_DATA_VERSION, K_DATA_VERSION)
    first = raw[0]
    try:
        return DataVersion(int(first.get("counter") or 0), int(first.get("timestamp") or 0))
    except (TypeError, ValueError):
        raise fail("counter and timestamp must be numbers", K_DATA_VERSION, K_DATA_VERSION, 0) from None


def _parse_account(raw: object, path: str, i: int, root: yaml.Node | None, warnings: list[str]) -> Account:
    here = (K_ACCOUNTS, i)
    if not isinstance(raw, dict):
        raise AclConfigError(path, _line(root, *here), f"{K_ACCOUNTS}[{i}]", "an account must be a mapping")

    def fail(name: str, problem: str) -> AclConfigError:
        return AclConfigError(path, _line(root, *here, name), f"{K_ACCOUNTS}[{i}].{name}", problem)

    def text(name: str) -> str | None:
        try:
            return _text(raw.get(name))
        except TypeError as e:
            raise fail(name, f"must be a string, not {e}") from None

    access_key = text(K_ACCESS_KEY)
    secret_key = text(K_SECRET_KEY)
    # PlainPermissionManager.checkPlainAccessConfig (its message would print the secret).
    if access_key is None or java_utf16_len(access_key) < _MIN_KEY_LENGTH:
        raise fail(K_ACCESS_KEY, f"accessKey={access_key} cannot be null and length should longer than 6")
    if secret_key is None or java_utf16_len(secret_key) < _MIN_KEY_LENGTH:
        raise fail(
            K_SECRET_KEY, f"the secretKey of accessKey={access_key} cannot be null and length should longer than 6"
        )

    admin_raw = raw.get(K_ADMIN)
    if admin_raw is None:
        admin = False
    elif isinstance(admin_raw, bool):
        admin = admin_raw
    elif isinstance(admin_raw, str) and admin_raw.strip().lower() in ("true", "false"):
        admin = admin_raw.strip().lower() == "true"
    elif isinstance(admin_raw, int) and admin_raw in (0, 1):
        admin = admin_raw == 1
    else:
        raise fail(K_ADMIN, f"must be true or false, not {admin_raw!r}")

    def perm(name: str) -> int:
        value = text(name)
        if value is not None and value.strip() not in _PERMS:
            warnings.append(f"{path}: {K_ACCOUNTS}[{i}].{name} = {value!r} is not a permission; read as DENY")
        return parse_perm(value)

    default_topic = perm(K_DEFAULT_TOPIC)
    default_group = perm(K_DEFAULT_GROUP)

    resources: dict[str, int] = {}
    # Permission.parseResourcePerms: groups first (as %RETRY%<group>), then topics.
    for name, is_topic in ((K_GROUP_PERMS, False), (K_TOPIC_PERMS, True)):
        items = raw.get(name)
        if items is None:
            continue
        if not isinstance(items, list):
            raise fail(name, "must be a list of '<name>=<perm>' items")
        for j, item in enumerate(items):
            try:
                item_text = _text(item) or ""
            except TypeError:
                item_text = ""
            parts = [p for p in item_text.split("=") if p]  # StringUtils.split(item, "=")
            if len(parts) != 2:
                raise AclConfigError(
                    path,
                    _line(root, *here, name, j),
                    f"{K_ACCOUNTS}[{i}].{name}[{j}]",
                    f"Parse resource permission failed for {'topic' if is_topic else 'group'}:{item_text}",
                )
            res = parts[0].strip()
            if parts[1].strip() not in _PERMS:
                warnings.append(
                    f"{path}: {K_ACCOUNTS}[{i}].{name}[{j}] = {item_text!r}: not a permission; read as DENY"
                )
            resources[res if is_topic else RETRY_GROUP_TOPIC_PREFIX + res] = parse_perm(parts[1])

    white = text(K_WHITE)
    try:
        pattern = compile_pattern(white)
    except AddressPatternError as e:
        raise fail(K_WHITE, f"bad address pattern: {e}") from None

    return Account(
        access_key, secret_key, pattern, admin, default_topic, default_group, MappingProxyType(resources), path
    )


# =========================================================================== the set
def build_acl_set(documents: Iterable[tuple[str, bytes]], default_file: str | None = None) -> AclSet:
    """Merge files given as (path, content), in load order (see the module doc)."""
    files: list[AclFile] = []
    accounts: dict[str, Account] = {}
    white: list[AddressPattern] = []
    warnings: list[str] = []
    digest = hashlib.sha256()
    for path, content in documents:
        encoded = path.encode("utf-8", "surrogateescape")
        digest.update(len(encoded).to_bytes(4, "big") + encoded + len(content).to_bytes(8, "big"))
        digest.update(content)
        acl_file = parse_acl_document(content, path)
        files.append(acl_file)
        warnings.extend(acl_file.warnings)
        white.extend(acl_file.global_white)
        for account in acl_file.accounts:
            first = accounts.get(account.access_key)
            if first is not None:
                warnings.append(
                    f"{path}: accessKey {account.access_key} is already defined in {first.path}; this one is ignored"
                )
                continue
            accounts[account.access_key] = account
    return AclSet(
        tuple(files), MappingProxyType(accounts), tuple(white), digest.hexdigest(), tuple(warnings), default_file
    )


def _walk(directory: Path, out: list[Path], seen: set[str]) -> None:
    real = os.path.realpath(directory)
    if real in seen:  # a symlink loop must not hang the reload thread
        return
    seen.add(real)
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith((".yml", ".yaml")) and entry.is_file():
            out.append(Path(entry.path))
        elif entry.is_dir():
            _walk(Path(entry.path), out, seen)


def acl_file_paths(home: str | os.PathLike[str], default_file: str = DEFAULT_ACL_FILE) -> list[Path]:
    """The files a load reads, in order: ``conf/acl/**`` (name order), the default file last."""
    base = Path(home)
    files: list[Path] = []
    _walk(base / ACL_DIR, files, set())
    default = base / default_file
    if default.is_file() and default not in files:
        files.append(default)
    return files


def acl_file_stamps(
    home: str | os.PathLike[str], default_file: str = DEFAULT_ACL_FILE
) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of every ACL file: a cheap "did anything change" probe for the watcher."""
    stamps: list[tuple[str, int, int]] = []
    for path in acl_file_paths(home, default_file):
        try:
            st = path.stat()
        except OSError:
            continue
        stamps.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(stamps)


def load_acl(home: str | os.PathLike[str], default_file: str = DEFAULT_ACL_FILE) -> AclSet:
    """Read and merge every ACL file under ``home``; ``AclConfigError`` names the first broken one.

    A missing default file is no error (4.9.8 creates it empty; creating files is the
    caller's business).
    """
    documents: list[tuple[str, bytes]] = []
    for path in acl_file_paths(home, default_file):
        try:
            documents.append((str(path), path.read_bytes()))
        except FileNotFoundError:  # removed between the listing and the read
            continue
        except OSError as e:
            raise AclConfigError(str(path), None, None, f"cannot read: {e.strerror}") from None
    return build_acl_set(documents, str(Path(home) / default_file))
