"""`rmq broker -c broker.conf [-n host:port;host:port]`: a RocketMQ-style properties file
with RocketMQ's key names; unknown keys are warned about (the broker still starts); a
wrong value makes `rmq broker` exit non-zero with a one-line message naming the key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmq.protocol.codes import ResponseCode
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, cluster_info, route

pytestmark = pytest.mark.timeout(60)


async def test_rocketmq_keys_apply_and_unknown_keys_are_warned_about(tmp_path):
    conf = {
        "brokerClusterName": "ClusterX",
        "defaultTopicQueueNums": 4,
        "flushDiskType": "SYNC_FLUSH",
        "someUnknownKey": "42",
        "anotherBogusKey": "true",
    }
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=conf) as br:
        log = br.log_text()
        for key in ("someUnknownKey", "anotherBogusKey"):
            lines = [ln for ln in log.splitlines() if key in ln]
            assert lines, f"no warning about the unknown key {key}:\n{log}"
            assert "WARNING" in lines[0] and "unknown key" in lines[0]
        # known keys are not reported as unknown
        for key in (
            "brokerClusterName",
            "defaultTopicQueueNums",
            "flushDiskType",
            "listenPort",
            "mappedFileSizeCommitLog",
            "storePathRootDir",
            "brokerIP1",
        ):
            assert f"unknown key {key!r}" not in log and f"unknown key '{key}'" not in log
        async with BrokerApi(br.addr) as api:
            tbw = (await api.topics())["TBW102"]
            assert (tbw.read_queue_nums, tbw.write_queue_nums, tbw.perm) == (4, 4, 7)
            assert (await api.runtime_info())["flushDiskType"] == "SYNC_FLUSH"
            ci = await cluster_info(api.client, ns.addr)
            assert ci.cluster_addr_table == {"ClusterX": ["broker-a"]}
            code, rd = await route(api.client, ns.addr, "TBW102")
            assert code == ResponseCode.SUCCESS
            assert rd.broker_datas[0].cluster == "ClusterX"
            assert rd.queue_datas[0].write_queue_nums == 4


def _run_broker(conf_path: Path, *extra: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", "broker", "-c", str(conf_path), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=conf_path.parent,
    )


@pytest.mark.parametrize(
    "key,value",
    [
        ("listenPort", "abc"),
        ("flushDiskType", "SOMETIMES"),
        ("brokerRole", "BOSS"),
        ("autoCreateTopicEnable", "maybe"),
        ("mappedFileSizeCommitLog", "1G"),
        ("listenPort", "70000"),
        ("mappedFileSizeCommitLog", "100"),
        ("brokerId", "-1"),
        ("messageDelayLevel", "1x 5s"),
    ],
)
def test_wrong_value_exits_non_zero_naming_the_key(tmp_path, key, value):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerClusterName=C\nbrokerName=b\nlistenPort=0\nstorePathRootDir={tmp_path / 'store'}\n{key}={value}\n"
    )
    p = _run_broker(conf)
    assert p.returncode != 0
    out = (p.stdout + p.stderr).strip()
    lines = out.splitlines()
    assert len(lines) == 1, f"expected a one-line message, got:\n{out}"
    assert key in lines[0], lines[0]
    assert "Traceback" not in out
    assert not (tmp_path / "store" / "abort").exists()


def test_unreadable_config_file(tmp_path):
    p = _run_broker(tmp_path / "does-not-exist.conf")
    assert p.returncode != 0
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert len(lines) == 1 and "does-not-exist.conf" in lines[0]


def test_bad_namesrv_address_on_the_command_line(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\nlistenPort=0\nstorePathRootDir={tmp_path / 'store'}\n")
    p = _run_broker(conf, "-n", "127.0.0.1:9876;nonsense")
    assert p.returncode != 0
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert len(lines) == 1 and "namesrvAddr" in lines[0] and "nonsense" in lines[0], lines
