/*
 * The official RocketMQ 4.9.8 Java client signing with AclClientRPCHook, for rmq's ACL
 * interop tests (tests/interop/test_java_acl.py). Compiled by tests/interop/java_build.py
 * against ../shared/rocketmq-4.9.8/lib and run with `EXTRA_CP=DIR bin/rocketmq java AclClient`.
 *
 * One command per run:
 *   AclClient produce NS TOPIC N AK SK [S]        N sync sends (bodies TOPIC-0 .. TOPIC-(N-1)); with S,
 *                                                 a refused send is tried again until S seconds passed
 *   AclClient consume NS TOPIC GROUP N AK SK [S]   DefaultLitePullConsumer from the first offset
 *                                                 until N messages or S seconds (default 30)
 *   AclClient pull NS TOPIC GROUP AK SK           DefaultMQPullConsumer.pull(queue 0, offset 0)
 *   AclClient sendAndView NS TOPIC AK SK          one send, then viewMessage(topic, msgId): QUERY_MESSAGE
 *                                                 by UNIQ_KEY (ext _UNIQUE_KEY_QUERY, signed by 4.9.4+)
 *   AclClient createTopic NS BROKER TOPIC AK SK   DefaultMQAdminExt.createAndUpdateTopicConfig
 *   AclClient deleteTopic NS BROKER TOPIC AK SK   DefaultMQAdminExt.deleteTopicInBroker
 *   AclClient updateBrokerConfig NS BROKER KEY VALUE AK SK
 * or many: `AclClient batch` reads such commands from stdin, one per line (fields separated
 * by tabs), and runs them one after the other in this JVM (a JVM start costs ~1 s).
 * AK "-" means no credentials (no RPC hook at all).
 *
 * Output: one JSON line per command on stdout:
 *   {"n":0,"op":"produce","ok":true,"sent":3}
 *   {"n":1,"op":"produce","ok":false,"error":"<every message of the exception's cause chain>"}
 * A single command exits 1 when it failed; `batch` exits 0 once every command ran.
 */

import com.alibaba.fastjson.JSON;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class AclClient {
    private static final AtomicInteger INSTANCES = new AtomicInteger();

    public static void main(String[] args) throws Exception {
        int rc;
        if (args.length == 1 && args[0].equals("batch")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            int n = 0;
            while ((line = in.readLine()) != null) {
                if (!line.trim().isEmpty()) {
                    run(n++, line.split("\t"));
                }
            }
            rc = 0;
        } else {
            rc = run(0, args) ? 0 : 1;
        }
        System.out.flush();
        System.exit(rc);
    }

    /** Runs one command; prints its result line; true when it succeeded. */
    static boolean run(int n, String[] a) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("n", n);
        out.put("op", a.length > 0 ? a[0] : "");
        try {
            switch (a[0]) {
                case "produce": produce(a, out); break;
                case "consume": consume(a, out); break;
                case "pull": pull(a, out); break;
                case "sendAndView": sendAndView(a, out); break;
                case "createTopic": case "deleteTopic": case "updateBrokerConfig": admin(a, out); break;
                default: throw new IllegalArgumentException("unknown command " + String.join(" ", a));
            }
            out.put("ok", true);
        } catch (Throwable t) {
            out.put("ok", false);
            out.put("error", chain(t));
        }
        System.out.println(JSON.toJSONString(out));
        System.out.flush();
        return Boolean.TRUE.equals(out.get("ok"));
    }

    static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (sb.length() > 0) sb.append(" | caused by ");
            sb.append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return sb.toString();
    }

    static RPCHook hook(String ak, String sk) {
        return "-".equals(ak) ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static String instance() {
        // one MQClientInstance per command: instances are shared per name, RPC hook included
        return "acl-" + ProcessHandle.current().pid() + "-" + INSTANCES.incrementAndGet();
    }

    static void produce(String[] a, Map<String, Object> out) throws Exception {
        String ns = a[1], topic = a[2];
        int count = Integer.parseInt(a[3]);
        long retryUntil = System.currentTimeMillis() + (a.length > 6 ? Long.parseLong(a[6]) * 1000 : 0);
        DefaultMQProducer p = new DefaultMQProducer("PG_" + topic, hook(a[4], a[5]));
        p.setNamesrvAddr(ns);
        p.setInstanceName(instance());
        p.start();
        List<String> ids = new ArrayList<>();
        try {
            int attempts = 0;
            for (int i = 0; i < count; i++) {
                Message m = new Message(topic, "TagA", (topic + "-" + i).getBytes(StandardCharsets.UTF_8));
                SendResult r;
                while (true) {
                    attempts++;
                    out.put("attempts", attempts);
                    try {
                        r = p.send(m);
                        break;
                    } catch (Exception e) {
                        if (System.currentTimeMillis() >= retryUntil) throw e;
                        Thread.sleep(200);
                    }
                }
                ids.add(r.getSendStatus() + " " + r.getMsgId());
                out.put("sent", i + 1);
            }
        } finally {
            p.shutdown();
        }
        out.put("results", ids);
    }

    static void consume(String[] a, Map<String, Object> out) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        int count = Integer.parseInt(a[4]);
        long seconds = a.length > 7 ? Long.parseLong(a[7]) : 30;
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, hook(a[5], a[6]));
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        List<String> bodies = new ArrayList<>();
        try {
            long deadline = System.currentTimeMillis() + seconds * 1000;
            while (bodies.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(500)) {
                    bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
                }
            }
            c.commitSync();
        } finally {
            c.shutdown();
        }
        Collections.sort(bodies);
        out.put("received", bodies.size());
        out.put("bodies", bodies);
        if (bodies.size() < count) {
            throw new IllegalStateException("received " + bodies.size() + " of " + count + " messages");
        }
    }

    @SuppressWarnings("deprecation")
    static void sendAndView(String[] a, Map<String, Object> out) throws Exception {
        String ns = a[1], topic = a[2];
        DefaultMQProducer p = new DefaultMQProducer("PG_" + topic, hook(a[3], a[4]));
        p.setNamesrvAddr(ns);
        p.setInstanceName(instance());
        p.start();
        try {
            String body = topic + "-viewed";
            SendResult r = p.send(new Message(topic, "TagV", body.getBytes(StandardCharsets.UTF_8)));
            out.put("msgId", r.getMsgId());
            // the broker indexes asynchronously: ask again while the key is not found yet
            long deadline = System.currentTimeMillis() + 15000;
            while (true) {
                MessageExt m = null;
                try {
                    m = p.viewMessage(topic, r.getMsgId());  // null while not found
                } catch (MQClientException e) {
                    // "query message by key finished, but no message." while not indexed yet
                    if (!String.valueOf(e.getErrorMessage()).contains("no message")) throw e;
                }
                if (m != null) {
                    out.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                    break;
                }
                if (System.currentTimeMillis() >= deadline) throw new IllegalStateException(r.getMsgId() + " not found");
                Thread.sleep(200);
            }
        } finally {
            p.shutdown();
        }
    }

    @SuppressWarnings("deprecation")
    static void pull(String[] a, Map<String, Object> out) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook(a[4], a[5]));
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance());
        c.start();
        try {
            MessageQueue mq = null;
            for (MessageQueue q : c.fetchSubscribeMessageQueues(topic)) {
                if (q.getQueueId() == 0) mq = q;
            }
            PullResult r = c.pull(mq, "*", 0, 32);
            out.put("status", r.getPullStatus().name());
            out.put("found", r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size());
        } finally {
            c.shutdown();
        }
    }

    static void admin(String[] a, Map<String, Object> out) throws Exception {
        String ns = a[1], broker = a[2];
        boolean config = a[0].equals("updateBrokerConfig");
        RPCHook h = config ? hook(a[5], a[6]) : hook(a[4], a[5]);
        DefaultMQAdminExt admin = h == null ? new DefaultMQAdminExt() : new DefaultMQAdminExt(h);
        admin.setNamesrvAddr(ns);
        admin.setInstanceName(instance());
        admin.start();
        try {
            if (a[0].equals("createTopic")) {
                TopicConfig tc = new TopicConfig(a[3], 4, 4, 6);
                admin.createAndUpdateTopicConfig(broker, tc);
            } else if (a[0].equals("deleteTopic")) {
                admin.deleteTopicInBroker(Collections.singleton(broker), a[3]);
            } else {
                Properties p = new Properties();
                p.setProperty(a[3], a[4]);
                admin.updateBrokerConfig(broker, p);
            }
        } finally {
            admin.shutdown();
        }
    }
}
