'use strict';
// Shared helpers of the ali-ons drivers (producer.js, consumer.js).
//
// Output contract (same as the C++ drivers): stdout carries only JSON lines
// (events started / sent / send_error / message / summary / fatal); every log
// line of ali-ons and of these drivers goes to stderr.

function emit(rec) {
  process.stdout.write(JSON.stringify(rec) + '\n');
}

function fatal(msg, code = 2) {
  emit({ event: 'fatal', error: msg });
  process.stderr.write(`error: ${msg}\n`);
  // let stdout drain before leaving
  process.stdout.write('', () => process.exit(code));
  setTimeout(() => process.exit(code), 1000).unref();
}

// ali-ons calls logger.info/warn/error/debug with util.format-style arguments.
const util = require('util');
function makeLogger(level) {
  const order = { debug: 0, info: 1, warn: 2, error: 3 };
  const min = order[level] === undefined ? order.warn : order[level];
  const out = {};
  for (const name of Object.keys(order)) {
    out[name] = (...args) => {
      if (order[name] >= min) process.stderr.write(`[ali-ons ${name}] ${util.format(...args)}\n`);
    };
  }
  return out;
}

// Minimal --flag value / --flag=value / -n N parser; spec: {name: {type, default, help}}
function parseArgs(argv, spec, usage) {
  const opts = {};
  for (const [k, s] of Object.entries(spec)) opts[k] = s.default;
  const aliases = { n: 'count' };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    if (a === '-h' || a === '--help') {
      process.stderr.write(usage + '\n\noptions:\n' + Object.entries(spec).map(
        ([k, s]) => `  --${k.replace(/_/g, '-')}${s.type === 'bool' ? '' : ' VALUE'}  ${s.help || ''}` +
          (s.default !== undefined && s.type !== 'bool' ? ` (default ${s.default})` : '')).join('\n') + '\n');
      process.exit(0);
    }
    let val;
    if (a.startsWith('--') && a.includes('=')) {
      val = a.slice(a.indexOf('=') + 1);
      a = a.slice(0, a.indexOf('='));
    }
    let key = a.startsWith('--') ? a.slice(2) : (a.startsWith('-') ? aliases[a.slice(1)] : undefined);
    if (!key) fatal(`unexpected argument ${argv[i]}`);
    key = key.replace(/-/g, '_');
    const s = spec[key];
    if (!s) fatal(`unknown option ${a}`);
    if (s.type === 'bool') { opts[key] = val === undefined ? true : val !== 'false'; continue; }
    if (val === undefined) {
      if (i + 1 >= argv.length) fatal(`option ${a} needs a value`);
      val = argv[++i];
    }
    if (s.type === 'int' || s.type === 'float') {
      const n = Number(val);
      if (!Number.isFinite(n)) fatal(`option ${a}: ${val} is not a number`);
      opts[key] = n;
    } else {
      opts[key] = val;
    }
  }
  for (const [k, s] of Object.entries(spec)) {
    if (s.required && (opts[k] === undefined || opts[k] === '')) fatal(`--${k.replace(/_/g, '-')} is required`);
  }
  return opts;
}

function parseProps(s) {
  const out = {};
  for (const part of (s || '').split(',')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    if (eq <= 0) fatal(`--props: ${part} is not k=v`);
    out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return out;
}

// --namesrv 'a:1;b:2' (the C++ clients' list syntax): ali-ons takes a list only as
// an array (a string is used as one address), then rotates over it per request.
function nameSrvOption(s) {
  const list = String(s).split(';').map(a => a.trim()).filter(Boolean);
  return list.length > 1 ? list : list[0];
}

function aliOnsVersion() {
  return require('ali-ons/package.json').version;
}

// Options of every driver before its own (`spec`), parsed from the command line.
// `role` is the driver's role in the started line: 'producer' or 'push_consumer'.
function driverArgs(role, spec, usage) {
  const what = role.split('_').pop();
  return parseArgs(process.argv.slice(2), {
    namesrv: { required: true, help: 'NameServer host:port[;host:port...]' },
    topic: { required: true },
    group: { required: true, help: `${what} group` },
    ...spec,
    access_key: { help: 'ACL: sign every request with this AccessKey (ali-ons accessKey)' },
    secret_key: { help: 'ACL: ... and this SecretKey (ali-ons secretKey)' },
    start_timeout_ms: { type: 'int', default: 15000, help: `give up if the ${what} is not ready by then` },
    log_level: { default: 'warn', help: 'ali-ons log level on stderr: debug|info|warn|error' },
  }, usage);
}

// The ali-ons client options both drivers pass, plus the role's own (`extra`).
function clientOptions(opts, extra) {
  return {
    nameSrv: nameSrvOption(opts.namesrv),
    httpclient: {},  // required by ali-ons; only used to look up an ONS address server
    logger: makeLogger(opts.log_level),
    ...(opts.access_key !== undefined ? { accessKey: opts.access_key, secretKey: opts.secret_key } : {}),
    ...extra,
  };
}

// Waits for client.ready() (fatal after --start-timeout-ms or on failure), then prints
// the started line with `fields`. Resolves false when the driver is exiting.
async function startClient(client, role, opts, fields) {
  const what = role.split('_').pop();
  const timer = setTimeout(() => fatal(`${what} not ready after ${opts.start_timeout_ms} ms`),
    opts.start_timeout_ms);
  try {
    await client.ready();
  } catch (err) {
    fatal(`${what} start failed: ${err && err.message || err}`);
    return false;
  }
  clearTimeout(timer);
  emit({ event: 'started', client: 'node', package_version: aliOnsVersion(), role,
    group: opts.group, topic: opts.topic, ...fields, namesrv: opts.namesrv, pid: process.pid });
  return true;
}

module.exports = { emit, fatal, parseProps, driverArgs, clientOptions, startClient };
