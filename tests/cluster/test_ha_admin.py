"""rmq admin haStatus against a master and its slave (mqadmin conventions: aligned
table, --json, one-line errors, exit codes)."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from rmq.admin.main import main as admin_main
from tests.cluster.ha_util import ha_group, master_conf, slave_conf, wait_in_sync
from tests.integration.broker_util import BrokerApi

pytestmark = pytest.mark.timeout(120)


def admin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = admin_main(list(argv), out, err)
    return rc, out.getvalue(), err.getvalue()


async def _load(g) -> int:
    async with BrokerApi(g.master.addr) as api:
        await api.create_topic("HAAdmin", 2)
        for i in range(20):
            await api.send_ok("HAAdmin", b"x%d" % i)
    return await wait_in_sync(g)


def test_ha_status():
    with ha_group(master_conf(), slave_conf()) as g:
        top = asyncio.run(_load(g))
        rc, text, err = admin("haStatus", "-n", g.ns.addr, "-b", g.master.addr)
        assert rc == 0 and not err
        lines = text.splitlines()
        assert lines[1].split() == ["#Role", "ASYNC_MASTER"]
        assert lines[3].split() == ["#CommitLogMaxOffset", str(top)]
        header = next(i for i, ln in enumerate(lines) if ln.startswith("#SlaveAddr"))
        row = lines[header + 1].split()
        assert row[1:5] == ["1", str(top), "0", row[4]] and row[5] == "OK"
        # columns line up under their headers
        assert lines[header + 1].index(str(top)) + len(str(top)) == lines[header].index("#SlaveAckOffset") + len(
            "#SlaveAckOffset"
        )

        rc, text, _ = admin("haStatus", "-n", g.ns.addr, "-b", g.slave.addr)
        assert rc == 0
        assert "#MasterAddr" in text and "#Connected            true" in text
        assert f"#CommitLogMaxOffset   {top}" in text

        rc, text, _ = admin("haStatus", "-n", g.ns.addr, "-c", "TestCluster", "--json")
        doc = json.loads(text)
        assert set(doc) == {g.master.addr, g.slave.addr}
        m = doc[g.master.addr]
        assert m["brokerRole"] == "ASYNC_MASTER" and m["inSyncSlaveNums"] == 1
        assert [c["slaveAckOffset"] for c in m["haConnectionInfo"]] == [top]
        assert doc[g.slave.addr]["haClientRuntimeInfo"]["isActivated"] is True

    rc, text, err = admin("haStatus", "-b", "127.0.0.1:1", "--timeout", "1000")
    assert rc == 1 and not text and err.count("\n") == 1
    assert err.startswith("rmq admin haStatus: ")
    rc, _, err = admin("haStatus")
    assert rc == 2 and "exactly one of -b" in err
