"""Retry through the broker with real third-party consumers (issue 4's interop item).

A listener that answers "reconsume later" makes the client send the message back
(CONSUMER_SEND_MSG_BACK, delay level 0 → 3 + reconsumeTimes); the broker stores it in
SCHEDULE_TOPIC_XXXX, then in %RETRY%<group>, which the client subscribed to on its own;
it comes back with reconsumeTimes counted up and the original topic restored. The
broker here has one-second delay levels so three deliveries take seconds, not minutes.

The C++ binding hands a batch to the Python callback one message at a time and gives up
on the batch at the first failure, so messages behind it in a batch taken from the retry
queue are sent back without being shown: a C++ listener may see reconsumeTimes 0 then 2.
The broker side (one stored copy per send-back, counting up) is the same for both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

from rmq.common.mixall import retry_topic
from tests.interop.conftest import Clients, Cluster, _start_cluster, unique_name

pytestmark = pytest.mark.timeout(180)

FAST_LEVELS = " ".join(["1s"] * 18)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _start_cluster(tmp_path_factory.mktemp("retry"), broker_conf={"messageDelayLevel": FAST_LEVELS})


@pytest.mark.parametrize("client", ["node", "cpp2"])
def test_reconsume_later_comes_back_through_the_retry_topic(cluster: Cluster, clients: Clients, client: str):
    topic, pgroup, cgroup = (unique_name(f"{client}-rt"), unique_name(f"{client}-rpg"), unique_name(f"{client}-rcg"))
    cluster.create_topic(topic)
    n, fails = 4, 2
    # ali-ons starts a new group at the last offset: start it before producing
    consumer = clients.consumer(client, cluster.namesrv_addr, topic, cgroup, reconsume_until=fails)
    sent = clients.produce(client, cluster.namesrv_addr, topic, pgroup, n)
    bodies = [s["body"] for s in sent]
    consumer.wait_bodies(bodies, timeout=90)
    consumer.terminate()
    deliveries: dict[str, list[dict]] = defaultdict(list)
    for m in consumer.messages:
        deliveries[m["body"]].append(m)
    stored: dict[str, list] = defaultdict(list)
    for copy in cluster.pull_all(retry_topic(cgroup), queues=1):
        stored[copy.body.decode()].append(copy)
    for body in bodies:
        got = deliveries[body]
        times = [m["reconsume_times"] for m in got]
        # reconsumeTimes counts up; "later" while below `fails`, then success
        assert times == sorted(set(times)) and times[0] == 0, got
        assert [m["action"] for m in got] == ["RECONSUME_LATER" if t < fails else "CONSUME_SUCCESS" for t in times], got
        assert times[-1] == fails, got
        # the listener sees the original topic, not %RETRY%<group>
        assert {m["topic"] for m in got} == {topic}, got
        # every send-back stored one copy under the retry topic, counting up, with the
        # first message id kept as ORIGIN_MESSAGE_ID
        copies = stored[body]
        assert [c.reconsume_times for c in copies] == list(range(1, fails + 1)), copies
        assert len({c.properties.get("ORIGIN_MESSAGE_ID") for c in copies}) == 1
        assert copies[0].properties.get("RETRY_TOPIC") == topic
