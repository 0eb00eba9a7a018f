// SimpleConsumer driver for npm rocketmq-client-nodejs 1.0.8 against rmq proxy.
//   node consumer.js ENDPOINTS SPEC_JSON     SPEC = {"topic", "group", "expect": N, "timeout": s}
// receive (invisible 15 s) and ack until N acked or the timeout; one JSON line per event:
// {"event": "received"|"acked"|"error"|"done", ...}.
'use strict';
const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { out, run } = require('./common');

run(async (endpoints, spec) => {
  const consumer = new SimpleConsumer({
    endpoints,
    consumerGroup: spec.group,
    subscriptions: new Map([[spec.topic, '*']]),
    awaitDuration: 5000,
    requestTimeout: 5000,
  });
  await consumer.startup();
  const acked = new Set();
  const deadline = Date.now() + (spec.timeout || 60) * 1000;
  try {
    while (acked.size < spec.expect && Date.now() < deadline) {
      const messages = await consumer.receive(16, 15000);
      for (const m of messages) {
        const body = m.body.toString();
        out({ event: 'received', body, message_id: m.messageId, attempt: m.deliveryAttempt, tag: m.tag });
        await consumer.ack(m);
        acked.add(body);
        out({ event: 'acked', body });
      }
    }
  } finally {
    await consumer.shutdown();
  }
  out({ event: 'done', acked: acked.size });
});
