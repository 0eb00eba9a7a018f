"""The broker's plain ACL. The auth hook and the reload loop are shared with the
NameServer and live in ``rmq.remoting.acl_guard``; these are its names, re-exported for
the broker's parts that import them from here."""

from rmq.remoting.acl_guard import ROCKETMQ_HOME_ENV, AclGuard, AclReloadService, acl_home, load_acl_set

__all__ = ["ROCKETMQ_HOME_ENV", "AclGuard", "AclReloadService", "acl_home", "load_acl_set"]
