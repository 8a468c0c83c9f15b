// abx's base image run by runc (tests/e2e/runc/run.sh starts it; this file runs inside the
// container's network namespace): the official e2b SDK in debug mode talks to the image's own
// entrypoint, abx-envd, at localhost:49983 — no abxd involved.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from 'e2b';

async function ready() {
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch('http://localhost:49983/health');
      if (r.status < 500) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('envd did not answer on localhost:49983');
}

test('the e2b SDK drives abx-envd in an abx image under runc', async () => {
  await ready();
  const sbx = await Sandbox.create({ debug: true });
  const r = await sbx.commands.run('cat /etc/debian_version && python3 -c "print(6*7)" && hostname');
  assert.equal(r.exitCode, 0);
  const lines = r.stdout.trim().split('\n');
  assert.match(lines[0], /^12\./);  // the image's Debian, not the host's files
  assert.equal(lines[1], '42');
  assert.equal(lines[2], 'abx-runc');  // runc's container, from its config.json

  await sbx.files.write('/tmp/runc.txt', 'written through envd');
  assert.equal(await sbx.files.read('/tmp/runc.txt'), 'written through envd');
  const who = await sbx.commands.run('id -un', { user: 'user' });
  assert.equal(who.stdout.trim(), 'user');  // the image's E2B default user

  let failed;
  try {
    await sbx.commands.run('exit 3');
  } catch (e) {
    failed = e;
  }
  assert.equal(failed?.exitCode, 3);
});
