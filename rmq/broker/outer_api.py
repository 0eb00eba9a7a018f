"""BrokerOuterAPI: the broker's requests to NameServers (register, unregister), and the
one ``RemotingClient`` every request the broker originates goes through
(``outer_client``): registrations, controller heartbeats (controller_role.py) and the
slave's metadata sync from its master (slave_sync.py).

With ``innerClientAuthenticationCredentials`` that client signs every request with the
cluster credential, as a client's ``AclClientRPCHook`` does: a NameServer with
``aclEnable`` accepts the registrations, a master with ``aclEnable`` the slave sync,
without white-listing. Without it nothing is signed, as in 4.9.8 (spec 2.10).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from dataclasses import dataclass
from ssl import SSLContext

from rmq.auth.credentials import Credential
from rmq.protocol.bodies import KVTable, RegisterBrokerBody, TopicConfigSerializeWrapper
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

log = logging.getLogger("rmq.broker.register")


def outer_client(credential: Credential | None, ssl: SSLContext | None = None) -> RemotingClient:
    """The broker's client for NameServers, controllers and its master; signing with
    ``credential`` when there is one, TLS with ``ssl`` (rmq.remoting.tls.outbound_context)."""
    return RemotingClient(
        request_hook=credential.sign if credential is not None else None, name="broker-outer", ssl=ssl
    )


@dataclass
class RegisterResult:
    namesrv: str
    ha_server_addr: str | None
    master_addr: str | None
    order_topics: dict[str, str]


@dataclass(frozen=True)
class BrokerIdentity:
    """The broker as every (un)register request names it."""

    cluster: str
    addr: str
    name: str
    broker_id: int


class BrokerOuterAPI:
    def __init__(self, client: RemotingClient) -> None:
        self.client = client

    async def register_broker_all(
        self,
        namesrvs: list[str],
        me: BrokerIdentity,
        *,
        ha_server_addr: str,
        wrapper: TopicConfigSerializeWrapper,
        compressed: bool,
        timeout_ms: int,
    ) -> list[RegisterResult]:
        """Register with every NameServer at once; a NameServer that fails is logged and skipped."""
        body = RegisterBrokerBody(wrapper, []).encode(compressed)
        crc = zlib.crc32(body) & 0x7FFFFFFF
        header = RegisterBrokerRequestHeader(
            me.name, me.addr, me.cluster, ha_server_addr, me.broker_id, compressed=compressed, body_crc32=crc
        )

        async def one(addr: str) -> RegisterResult | None:
            cmd = RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.to_ext_fields(), body=body)
            try:
                resp = await self.client.invoke(addr, cmd, timeout_ms / 1000)
            except (RemotingError, OSError) as e:
                log.warning("register broker %s (%s) to NameServer %s failed: %s", me.name, me.addr, addr, e)
                return None
            if resp.code != ResponseCode.SUCCESS:
                log.warning(
                    "NameServer %s refused registration of %s: code %d %s", addr, me.name, resp.code, resp.remark
                )
                return None
            h = RegisterBrokerResponseHeader.from_ext_fields(resp.ext_fields)
            order = KVTable.from_json(resp.body).table if resp.body else {}
            return RegisterResult(addr, h.ha_server_addr or None, h.master_addr or None, order)

        results = await asyncio.gather(*(one(a) for a in namesrvs))
        return [r for r in results if r is not None]

    async def unregister_broker_all(self, namesrvs: list[str], me: BrokerIdentity, timeout_ms: int = 3000) -> None:
        header = UnRegisterBrokerRequestHeader(me.name, me.addr, me.cluster, me.broker_id)

        async def one(addr: str) -> None:
            cmd = RemotingCommand(RequestCode.UNREGISTER_BROKER, ext_fields=header.to_ext_fields())
            try:
                resp = await self.client.invoke(addr, cmd, timeout_ms / 1000)
                if resp.code == ResponseCode.SUCCESS:
                    log.info("unregistered %s (%s) from NameServer %s", me.name, me.addr, addr)
                else:
                    log.warning("unregister from %s: code %d %s", addr, resp.code, resp.remark)
            except (RemotingError, OSError) as e:
                log.warning("unregister broker %s from NameServer %s failed: %s", me.name, addr, e)

        await asyncio.gather(*(one(a) for a in namesrvs))
