"""Numbers of the remoting protocol: request/response/language codes, flags, sys flags.

Spec sections 1.2, 2.1, 2.2, 2.5 and 2.13. Every table is a plain class of int
constants (so ``RequestCode.SEND_MESSAGE_V2`` reads like the Java source) with a
``name_of(code)`` lookup for logs. The reverse maps are built once when the class
is created and exposed read-only; nothing here changes after import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar


class _CodeTable:
    """Base for the constant tables: collects ``NAME = int`` pairs into a reverse map."""

    _NAMES: ClassVar[Mapping[int, str]] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        names: dict[int, str] = {}
        # Parents first so a subclass (ResponseCode extends RemotingSysResponseCode,
        # as in Java) also knows the inherited names.
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if attr.isupper() and type(value) is int:
                    other = names.get(value)
                    # Two names for one number would make logs lie about which was meant.
                    if other is not None and other != attr:
                        raise TypeError(f"{cls.__name__}: {attr} and {other} share code {value}")
                    names[value] = attr
        cls._NAMES = MappingProxyType(names)

    @classmethod
    def name_of(cls, code: int) -> str:
        """The constant's name, or the decimal number when the code is not in the table."""
        name = cls._NAMES.get(code)
        return name if name is not None else str(code)

    @classmethod
    def is_known(cls, code: int) -> bool:
        return code in cls._NAMES


class RequestCode(_CodeTable):
    """``RequestCode`` (spec 2.1): the 4.9.8 set plus the 5.x codes the spec lists."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    GET_TIMER_CHECK_POINT = 60
    GET_TIMER_METRICS = 61
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    QUERY_TOPICS_BY_CONSUMER = 343
    QUERY_SUBSCRIPTION_BY_CONSUMER = 345
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    UPDATE_AND_GET_GROUP_FORBIDDEN = 353
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    GET_BROKER_MEMBER_GROUP = 901
    ADD_BROKER = 902
    REMOVE_BROKER = 903
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    GET_BROKER_HA_STATUS = 907
    RESET_MASTER_FLUSH_OFFSET = 908
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # rmq's own: failsafe confirmation between a master and its in-sync slaves
    RMQ_FAILSAFE_CHECK = 10901
    UPDATE_COLD_DATA_FLOW_CTR_CONFIG = 2001
    REMOVE_COLD_DATA_FLOW_CTR_CONFIG = 2002
    GET_COLD_DATA_FLOW_CTR_INFO = 2003
    SET_COMMITLOG_READ_MODE = 2004
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010
    # POP codes do not fit the ROCKETMQ binary header's int16 code field (spec 1.4):
    # they can only travel in JSON headers.
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    BATCH_ACK_MESSAGE = 200151


class RemotingSysResponseCode(_CodeTable):
    """Codes the remoting layer itself answers with (spec 1.5)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4


class ResponseCode(RemotingSysResponseCode):
    """``ResponseCode`` (spec 2.2); includes the RemotingSysResponseCode values."""

    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002
    # Client-side pseudo codes: never on the wire, used to report local failures.
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006


class LanguageCode(_CodeTable):
    """``LanguageCode`` (spec 1.2). JSON headers carry the name, binary headers the number."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13

    _BY_NAME: ClassVar[Mapping[str, int]] = MappingProxyType({})

    @classmethod
    def from_name(cls, name: str) -> int:
        """Code for an enum name; names this table does not know map to OTHER.

        Newer clients add languages faster than brokers learn them; refusing the
        connection over a log label would be the wrong trade.
        """
        code = cls._BY_NAME.get(name)
        return cls.OTHER if code is None else code

    @classmethod
    def name_of(cls, code: int) -> str:
        """Enum name; unknown numbers are reported (and JSON-encoded) as OTHER."""
        name = cls._NAMES.get(code)
        return name if name is not None else "OTHER"


LanguageCode._BY_NAME = MappingProxyType({v: k for k, v in LanguageCode._NAMES.items()})


class SerializeType(_CodeTable):
    """Header encodings (spec 1.1): the high byte of the header-length word."""

    JSON = 0
    ROCKETMQ = 1


class RemotingFlag(_CodeTable):
    """``RemotingCommand.flag`` bits (spec 1.2)."""

    RESPONSE = 1  # RPC_TYPE bit: 0 = request, 1 = response
    ONEWAY = 2  # RPC_ONEWAY bit: the requester expects no answer


def _bit_set(bit: int) -> Callable[[int], bool]:
    """The predicate "is bit set in this flag word" (the tables' has_* / is_* tests)."""

    def test(flags: int) -> bool:
        return bool(flags & bit)

    return test


class PullSysFlag(_CodeTable):
    """``PullMessageRequestHeader.sysFlag`` bits (spec 2.5)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10

    @staticmethod
    def build(
        commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool = False, lite_pull: bool = False
    ) -> int:
        return (
            (PullSysFlag.COMMIT_OFFSET if commit_offset else 0)
            | (PullSysFlag.SUSPEND if suspend else 0)
            | (PullSysFlag.SUBSCRIPTION if subscription else 0)
            | (PullSysFlag.CLASS_FILTER if class_filter else 0)
            | (PullSysFlag.LITE_PULL_MESSAGE if lite_pull else 0)
        )

    @staticmethod
    def clear_commit_offset(sys_flag: int) -> int:
        return sys_flag & ~PullSysFlag.COMMIT_OFFSET

    has_commit_offset = staticmethod(_bit_set(COMMIT_OFFSET))
    has_suspend = staticmethod(_bit_set(SUSPEND))
    has_subscription = staticmethod(_bit_set(SUBSCRIPTION))
    has_class_filter = staticmethod(_bit_set(CLASS_FILTER))
    has_lite_pull = staticmethod(_bit_set(LITE_PULL_MESSAGE))


class PermName(_CodeTable):
    """Topic permission bits (spec 2.13, ``PermName``)."""

    PERM_INHERIT = 1
    PERM_WRITE = 2
    PERM_READ = 4
    PERM_PRIORITY = 8

    is_readable = staticmethod(_bit_set(PERM_READ))
    is_writeable = staticmethod(_bit_set(PERM_WRITE))
    is_inherited = staticmethod(_bit_set(PERM_INHERIT))

    @staticmethod
    def perm_to_string(perm: int) -> str:
        """``PermName.perm2String``: "RWX" positions, "-" where the bit is clear."""
        return (
            ("R" if perm & PermName.PERM_READ else "-")
            + ("W" if perm & PermName.PERM_WRITE else "-")
            + ("X" if perm & PermName.PERM_INHERIT else "-")
        )


PERM_RW = PermName.PERM_READ | PermName.PERM_WRITE


class MQVersion(_CodeTable):
    """Ordinals of ``MQVersion.Version`` that change wire behaviour (spec 1.2, 2.15)."""

    V3_4_9 = 121
    V4_9_4 = 401  # namesrv answers standard JSON route data from here on
    V4_9_8 = 409  # what rmq announces by default
    V5_0_0 = 413
    V5_3_3 = 479


def request_name(code: int) -> str:
    """``RequestCode.name_of``, for log lines."""
    return RequestCode.name_of(code)


def response_name(code: int) -> str:
    """``ResponseCode.name_of``, for log lines."""
    return ResponseCode.name_of(code)
