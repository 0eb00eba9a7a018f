#!/usr/bin/env node
'use strict';
// ali-ons@3.12.0 producer driver for rmq interop tests.
//   node producer.js --namesrv 127.0.0.1:9876 --topic T --group G -n 10 \
//        [--tags a,b] [--keys-prefix k] [--props k=v,...] [--body-prefix b] \
//        [--orderly --sharding-key-mod K]
// One JSON line per send (event sent / send_error) and a final summary line.
// ali-ons does not create topics: the topic must exist on the broker.
// --orderly: ali-ons has no MessageQueueSelector; it picks the queue from the
// message's sharding key (__SHARDINGKEY, md5(key) % queue count), so the driver
// sets shardingKey = String(i % K).
const { emit, fatal, parseProps, driverArgs, clientOptions, startClient } = require('./common');

const opts = driverArgs('producer', {
  count: { type: 'int', default: 1, help: 'messages to send (-n)' },
  start_index: { type: 'int', default: 0 },
  tags: { help: 'tag or comma-separated tags used round-robin' },
  keys_prefix: { help: 'keys = PREFIX + i' },
  props: { help: 'user properties k=v,k2=v2' },
  body_prefix: { default: 'body-', help: 'body = PREFIX + i' },
  orderly: { type: 'bool', default: false, help: 'set a sharding key on each message' },
  sharding_key_mod: { type: 'int', default: 1, help: 'with --orderly: shardingKey = i % K' },
  timeout_ms: { type: 'int', default: 3000, help: 'send timeout' },
  interval_ms: { type: 'int', default: 0 },
  keep_going: { type: 'bool', default: false, help: 'keep sending after a failed send' },
}, 'usage: node producer.js --namesrv ADDR --topic T --group G [-n N] [options]');

const { Producer, Message } = require('ali-ons');

async function main() {
  const props = parseProps(opts.props);
  const tags = opts.tags ? opts.tags.split(',') : [];
  const producer = new Producer(clientOptions(opts, {
    producerGroup: opts.group,
    sendMsgTimeout: opts.timeout_ms,
  }));
  let clientErrors = 0;
  producer.on('error', err => {
    clientErrors++;
    process.stderr.write(`[producer error] ${err && err.stack || err}\n`);
  });
  if (!await startClient(producer, 'producer', opts, {})) return;

  const t0 = Date.now();
  let sent = 0;
  let failed = 0;
  for (let i = opts.start_index; i < opts.start_index + opts.count; i++) {
    const body = `${opts.body_prefix}${i}`;
    const tag = tags.length ? tags[i % tags.length] : null;
    const msg = new Message(opts.topic, tag, body);
    // ali-ons writes every property with String(value): a message without a tag
    // would carry TAGS="null" on the wire. Drop it, as the Java client would.
    if (!tag) delete msg.properties.TAGS;
    const keys = opts.keys_prefix !== undefined ? `${opts.keys_prefix}${i}` : null;
    if (keys) msg.keys = [ keys ];
    for (const [k, v] of Object.entries(props)) msg.properties[k] = v;
    const rec = { i, body, tags: tag, keys };
    if (opts.orderly) {
      msg.shardingKey = String(i % Math.max(1, opts.sharding_key_mod));
      rec.sharding_key = msg.shardingKey;
    }
    try {
      const r = await producer.send(msg);
      emit({ event: 'sent', status: r.sendStatus, msg_id: r.msgId, offset_msg_id: r.msgId,
        queue_id: r.messageQueue && Number(r.messageQueue.queueId),
        broker_name: r.messageQueue && r.messageQueue.brokerName,
        queue_offset: r.queueOffset, ...rec });
      sent++;
    } catch (err) {
      failed++;
      emit({ event: 'send_error', error: `${err && err.name}: ${err && err.message}`, ...rec });
      if (!opts.keep_going) break;
    }
    if (opts.interval_ms) await new Promise(r => setTimeout(r, opts.interval_ms));
  }
  emit({ event: 'summary', client: 'node', role: 'producer', sent, failed, requested: opts.count,
    client_errors: clientErrors, elapsed_s: (Date.now() - t0) / 1000 });
  const code = failed === 0 && sent === opts.count ? 0 : 1;
  // close() unregisters the client; do not let a dead broker hold the exit.
  setTimeout(() => process.exit(code), 3000).unref();
  try { await producer.close(); } catch (err) { /* ignore */ }
  process.exit(code);
}

main().catch(err => fatal(`unexpected: ${err && err.stack || err}`));
