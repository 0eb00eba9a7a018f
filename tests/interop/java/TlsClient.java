// The real RocketMQ 4.9.8 Java client over TLS (tests/interop/test_java_tls.py): run with
// -Dtls.enable=true (ClientConfig.useTLS) it produces N messages, then reads them back with a
// DefaultLitePullConsumer. Prints USE_TLS, SENT and RECEIVED lines and a DONE summary; exits 0
// when every message was sent and received.
//
// usage: TlsClient NAMESRV TOPIC N TAG
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TlsClient {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        String tag = args[3];

        DefaultMQProducer producer = new DefaultMQProducer("tls_pg_" + tag);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("tls-p-" + tag);
        producer.start();
        System.out.println("USE_TLS " + producer.isUseTLS());
        int sent = 0;
        try {
            for (int i = 0; i < n; i++) {
                SendResult r = producer.send(new Message(topic, (tag + "-" + i).getBytes(StandardCharsets.UTF_8)));
                System.out.println("SENT " + r.getSendStatus() + " " + r.getMsgId());
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    sent++;
                }
            }
        } finally {
            producer.shutdown();
        }

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("tls_cg_" + tag);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tls-c-" + tag);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.start();
        Set<String> got = new TreeSet<>();
        // a bound, not an expectation: the test fails on the counts below
        long deadline = System.currentTimeMillis() + 60000;
        try {
            while (got.size() < n && System.currentTimeMillis() < deadline) {
                for (MessageExt m : consumer.poll(1000)) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (body.startsWith(tag + "-") && got.add(body)) {
                        System.out.println("RECEIVED " + body);
                    }
                }
            }
        } finally {
            consumer.shutdown();
        }
        System.out.println("DONE sent=" + sent + " received=" + got.size());
        System.out.flush();
        System.exit(sent == n && got.size() == n ? 0 : 1);
    }
}
