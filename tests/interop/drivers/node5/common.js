// Shared by the 5.x Node SDK drivers: JSON lines on stdout, argv (ENDPOINTS SPEC_JSON), exit codes.
'use strict';

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// run(async (endpoints, spec) => ...): exit 0 when it returns, 1 (with an error line) when it throws
function run(body) {
  const [endpoints, specText] = process.argv.slice(2);
  body(endpoints, JSON.parse(specText)).then(() => process.exit(0), e => {
    out({ event: 'error', error: String(e && e.stack || e) });
    process.exit(1);
  });
}

module.exports = { out, run };
