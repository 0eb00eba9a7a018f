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

module.exports = { emit, fatal, makeLogger, nameSrvOption, parseArgs, parseProps, aliOnsVersion };
