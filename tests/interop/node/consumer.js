#!/usr/bin/env node
'use strict';
// ali-ons@3.12.0 push consumer driver for rmq interop tests.
//   node consumer.js --namesrv 127.0.0.1:9876 --topic T --group G [--expression '*'] \
//        [--from-first] [--broadcast] [--reconsume-until N] [--max-messages N] [--idle-exit S]
// One JSON line per delivered message (event message), a final summary line on
// SIGTERM/SIGINT, --max-messages or --idle-exit. Runs until killed otherwise.
// ali-ons has no orderly consumer: --orderly is refused (exit 2).
const { emit, fatal, driverArgs, clientOptions, startClient } = require('./common');

const opts = driverArgs('push_consumer', {
  expression: { default: '*', help: "tag expression, '*' or 'a || b'" },
  orderly: { type: 'bool', default: false, help: 'not supported by ali-ons (refused)' },
  broadcast: { type: 'bool', default: false, help: 'BROADCASTING message model' },
  from_first: { type: 'bool', default: false, help: 'CONSUME_FROM_FIRST_OFFSET for a new group' },
  reconsume_until: { type: 'int', default: 0, help: 'ACTION_RETRY while reconsumeTimes < N' },
  max_messages: { type: 'int', default: 0, help: 'exit 0 after N messages' },
  idle_exit: { type: 'float', default: 0, help: 'exit 0 after S seconds without a message' },
}, 'usage: node consumer.js --namesrv ADDR --topic T --group G [options]');

if (opts.orderly) fatal('ali-ons@3.12.0 has no orderly consumer (--orderly is not supported)');

const { Consumer } = require('ali-ons');

const t0 = Date.now();
let received = 0;
let retried = 0;
let clientErrors = 0;
let last = Date.now();
let finishing = false;
const RECONSUME_LATER_MARK = 'driver: reconsume later';
let consumer;
// ali-ons may deliver before ready() resolves; hold deliveries until the
// started line is out so it is always the first line.
let markStarted;
const startedP = new Promise(resolve => { markStarted = resolve; });

function finish(reason, code = 0) {
  if (finishing) return;
  finishing = true;
  emit({ event: 'summary', client: 'node', role: 'push_consumer', received,
    reconsume_later: retried, client_errors: clientErrors, reason,
    elapsed_s: (Date.now() - t0) / 1000 });
  setTimeout(() => process.exit(code), 3000).unref();
  const done = () => process.exit(code);
  if (consumer) consumer.close().then(done, done); else done();
}

process.on('SIGTERM', () => finish('SIGTERM'));
process.on('SIGINT', () => finish('SIGINT'));

// ali-ons's properties parser keeps the empty segment after the trailing \u0002
// as a "" -> "" entry; Java and C++ drop it, so the driver does too.
function cleanProps(p) {
  const out = {};
  for (const [k, v] of Object.entries(p || {})) if (k !== '') out[k] = v;
  return out;
}

function text(b) {
  if (b === null || b === undefined) return null;
  return Buffer.isBuffer(b) ? b.toString('utf8') : String(b);
}

async function main() {
  consumer = new Consumer(clientOptions(opts, {
    consumerGroup: opts.group,
    isBroadcast: opts.broadcast,
    consumeFromWhere: opts.from_first ? 'CONSUME_FROM_FIRST_OFFSET' : 'CONSUME_FROM_LAST_OFFSET',
  }));
  consumer.on('error', err => {
    if (err && String(err.message).includes(RECONSUME_LATER_MARK)) return;
    clientErrors++;
    process.stderr.write(`[consumer error] ${err && err.stack || err}\n`);
  });
  consumer.subscribe(opts.topic, opts.expression, async msg => {
    await startedP;
    if (finishing) return Consumer.ACTION_RETRY;
    last = Date.now();
    const retry = msg.reconsumeTimes < opts.reconsume_until;
    if (retry) retried++; else received++;
    emit({
      event: 'message',
      action: retry ? 'RECONSUME_LATER' : 'CONSUME_SUCCESS',
      topic: msg.topic,
      tags: msg.tags || null,
      keys: msg.keys || null,
      body: text(msg.body),
      queue_id: msg.queueId,
      queue_offset: msg.queueOffset,
      msg_id: msg.msgId,
      reconsume_times: msg.reconsumeTimes,
      commit_log_offset: msg.commitLogOffset,
      born_timestamp: msg.bornTimestamp,
      store_timestamp: msg.storeTimestamp,
      store_size: msg.storeSize,
      properties: cleanProps(msg.properties),
    });
    // Thrown, not returned: ali-ons wraps the handler of %RETRY% messages and drops its
    // return value, so ACTION_RETRY works only on a first delivery; an exception
    // makes it send the message back on every delivery.
    if (retry) throw new Error(RECONSUME_LATER_MARK);
    if (opts.max_messages && received >= opts.max_messages) setImmediate(() => finish('max_messages'));
  });
  if (!await startClient(consumer, 'push_consumer', opts,
    { expression: opts.expression, broadcast: opts.broadcast })) return;
  markStarted();
  if (opts.idle_exit) {
    setInterval(() => {
      if (Date.now() - last > opts.idle_exit * 1000) finish('idle_exit');
    }, 200);
  }
}

main().catch(err => fatal(`unexpected: ${err && err.stack || err}`));
