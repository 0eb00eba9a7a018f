/*
 * The official RocketMQ 4.9.8 Java client consuming what a 5.x SDK sent through rmq proxy
 * (tests/interop/test_python5_proxy.py). Compiled by tests/interop/java_build.py against
 * ../shared/rocketmq-4.9.8/lib.
 *
 *   Py5Consume NS TOPIC GROUP N [SECONDS]   DefaultLitePullConsumer from the first offset until N messages
 *
 * Output: one JSON line per message {"body","msgId","tags","keys","props"} (msgId: what a 4.x
 * application sees, the UNIQ_KEY), then {"done":true,"received":N}.
 */

import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class Py5Consume {
    public static void main(String[] args) throws Exception {
        String ns = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        long seconds = args.length > 4 ? Long.parseLong(args[4]) : 30;
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName("py5-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        int received = 0;
        try {
            long deadline = System.currentTimeMillis() + seconds * 1000;
            while (received < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(500)) {
                    Map<String, Object> out = new LinkedHashMap<>();
                    out.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                    out.put("msgId", m.getMsgId());
                    out.put("tags", m.getTags());
                    out.put("keys", m.getKeys());
                    out.put("props", m.getProperties());
                    System.out.println(JSON.toJSONString(out));
                    received++;
                }
            }
        } finally {
            c.shutdown();
        }
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("done", true);
        done.put("received", received);
        System.out.println(JSON.toJSONString(done));
        System.out.flush();
        System.exit(received >= count ? 0 : 1);
    }
}
