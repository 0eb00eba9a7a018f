// Driver for npm rocketmq-client-nodejs 1.0.8 (the official 5.x Node.js SDK) against rmq proxy.
//   node producer.js ENDPOINTS SPEC_JSON
//   SPEC = {"topic", "messages": [{body, tag?, keys?, props?, group?}], "ak"?, "sk"?}
// One JSON object per line on stdout: {"event": "sent"|"error"|"done", ...}.
'use strict';
const { Producer } = require('rocketmq-client-nodejs');
const { out, run } = require('./common');

run(async (endpoints, spec) => {
  const options = { endpoints, requestTimeout: 5000 };
  if (spec.ak) options.sessionCredentials = { accessKey: spec.ak, accessSecret: spec.sk };
  const producer = new Producer(options);
  await producer.startup();
  try {
    for (const item of spec.messages) {
      const msg = { topic: spec.topic, body: Buffer.from(item.body) };
      if (item.tag) msg.tag = item.tag;
      if (item.keys) msg.keys = item.keys;
      if (item.props) msg.properties = new Map(Object.entries(item.props));
      if (item.group) msg.messageGroup = item.group;
      try {
        const r = await producer.send(msg);
        out({ event: 'sent', body: item.body, message_id: r.messageId, offset: Number(r.offset) });
      } catch (e) {
        out({ event: 'error', body: item.body, error: String(e && e.stack || e) });
      }
    }
  } finally {
    await producer.shutdown();
  }
  out({ event: 'done' });
});
