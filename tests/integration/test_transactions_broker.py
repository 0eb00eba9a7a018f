"""Transactions at the broker (spec 2.12, 7.3), driven by raw requests like a producer."""

from __future__ import annotations

import asyncio

import pytest

from rmq.protocol.bodies import HeartbeatData, ProducerData
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rmq.protocol.message import SysFlag, decode_message_id, decode_record, decode_records
from rmq.remoting.client import RemotingClient
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CONF = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "transactionCheckMax": 3}


async def send_half(api: BrokerApi, topic: str, group: str, body: bytes) -> tuple[int, int, str]:
    uk = uniq_key()
    r = await api.send(
        topic,
        body,
        group=group,
        sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE,
        properties=props(uniq=uk, wait="true", TRAN_MSG="true", PGROUP=group),
    )
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    _, _, phy = decode_message_id(r.ext_fields["msgId"])
    return int(r.ext_fields["queueOffset"]), phy, uk


def end_tx(group: str, qoff: int, phy: int, uk: str, kind: int, from_check: bool = False) -> RemotingCommand:
    h = EndTransactionRequestHeader(group, qoff, phy, kind, uk, None, from_check, uk)
    cmd = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=h.to_ext_fields())
    cmd.mark_oneway()
    return cmd


async def visible(api: BrokerApi, topic: str) -> list:
    r = await api.pull(topic, 0, 0)
    return decode_records(r.body) if r.code == ResponseCode.SUCCESS else []


class Producer:
    """A producer connection that registered its group and answers checks as told."""

    def __init__(self, addr: str, group: str, answer: int | None) -> None:
        self.addr, self.group, self.answer = addr, group, answer
        self.checks: list[tuple[CheckTransactionStateRequestHeader, bytes]] = []
        self.client = RemotingClient()
        self.client.register_processor(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)

    def _on_check(self, conn, cmd: RemotingCommand):
        h = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
        self.checks.append((h, cmd.body))
        if self.answer is not None:
            reply = end_tx(
                self.group, h.tran_state_table_offset, h.commit_log_offset, h.msg_id, self.answer, from_check=True
            )
            asyncio.get_running_loop().create_task(self.client.invoke_oneway(self.addr, reply))
        return None

    async def register(self) -> None:
        hb = HeartbeatData(f"127.0.0.1@{self.group}-{id(self)}", [ProducerData(self.group)], [])
        r = await self.client.invoke(self.addr, RemotingCommand(RequestCode.HEART_BEAT, body=hb.to_json()), 5)
        assert r.code == ResponseCode.SUCCESS


async def test_commit_rollback_check_and_max_checks(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=CONF) as br:
        async with BrokerApi(br.addr) as api:
            topic, group = unique("TxT"), unique("TxPG")
            await api.create_topic(topic, queues=1)
            # commit: invisible before, visible after, as a COMMIT record pointing at the half
            qoff, phy, uk = await send_half(api, topic, group, b"commit-me")
            assert await visible(api, topic) == []
            await api.client.invoke_oneway(br.addr, end_tx(group, qoff, phy, uk, SysFlag.TRANSACTION_COMMIT_TYPE))
            await wait_until(lambda: visible(api, topic), 5, "committed message")
            [m] = await visible(api, topic)
            assert m.body == b"commit-me" and m.properties["UNIQ_KEY"] == uk
            assert SysFlag.transaction_value(m.sys_flag) == SysFlag.TRANSACTION_COMMIT_TYPE
            assert m.prepared_transaction_offset == phy
            assert "TRAN_MSG" not in m.properties and "REAL_TOPIC" not in m.properties
            # rollback: never visible
            qoff2, phy2, uk2 = await send_half(api, topic, group, b"roll-me-back")
            await api.client.invoke_oneway(br.addr, end_tx(group, qoff2, phy2, uk2, SysFlag.TRANSACTION_ROLLBACK_TYPE))
            # a mismatched END_TRANSACTION is refused (wrong group)
            bad = end_tx("OtherGroup", qoff2, phy2, uk2, SysFlag.TRANSACTION_COMMIT_TYPE)
            bad.flag = 0
            r = await api.client.invoke(br.addr, bad, 5)
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")

            # unknown -> checked -> committed by the producer's answer
            p1 = Producer(br.addr, group, SysFlag.TRANSACTION_COMMIT_TYPE)
            await p1.register()
            qoff3, phy3, uk3 = await send_half(api, topic, group, b"unknown-then-commit")
            await api.client.invoke_oneway(br.addr, end_tx(group, qoff3, phy3, uk3, SysFlag.TRANSACTION_NOT_TYPE))

            async def three() -> bool:
                return len(await visible(api, topic)) == 2

            await wait_until(three, 15, "the checked transaction to be committed")
            bodies = [x.body for x in await visible(api, topic)]
            assert bodies == [b"commit-me", b"unknown-then-commit"]
            h, body = p1.checks[0]
            rec = decode_record(body)
            assert rec.topic == topic and rec.body == b"unknown-then-commit"
            assert h.msg_id == uk3 and h.transaction_id == uk3
            await p1.client.close()

            # the producer that sent it is gone: another producer of the group is asked
            p2 = Producer(br.addr, group, SysFlag.TRANSACTION_ROLLBACK_TYPE)
            p3 = Producer(br.addr, group, SysFlag.TRANSACTION_COMMIT_TYPE)
            await p2.register()
            await p3.register()
            qoff4, phy4, uk4 = await send_half(api, topic, group, b"other-producer")
            await p2.client.close()  # dies before answering anything
            await wait_until(lambda: len(p3.checks) > 0, 15, "a check at the surviving producer")

            async def four() -> bool:
                return len(await visible(api, topic)) == 3

            await wait_until(four, 10, "the transaction committed by the other producer")
            await p3.client.close()

            # nobody answers: after transactionCheckMax (3) checks -> TRANS_CHECK_MAX_TIME_TOPIC
            silent = Producer(br.addr, group, None)
            await silent.register()
            qoff5, phy5, uk5 = await send_half(api, topic, group, b"never-answered")

            async def parked() -> bool:
                r = await api.pull("TRANS_CHECK_MAX_TIME_TOPIC", 0, 0)
                return r.code == ResponseCode.SUCCESS and any(
                    x.properties.get("UNIQ_KEY") == uk5 for x in decode_records(r.body)
                )

            await wait_until(parked, 30, "the half message in TRANS_CHECK_MAX_TIME_TOPIC")
            assert len([c for c in silent.checks if c[0].msg_id == uk5]) == 3
            assert [x.body for x in await visible(api, topic)] == [
                b"commit-me",
                b"unknown-then-commit",
                b"other-producer",
            ]
            await silent.client.close()
