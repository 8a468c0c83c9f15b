// The E2B network API, driven by the official E2B JS SDK against a real abxd: create with
// network {allowOut, denyOut, allowPublicTraffic} and allowInternetAccess, what getInfo shows,
// updateNetwork (which replaces the whole policy), and the SDK's errors for bad rules and for a
// sandbox that is gone. No traffic leaves the host: traffic itself is tests/e2e/network's job.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test network.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { ALL_TRAFFIC, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';

let abxd;
let home;
let baseUrl;
const made = [];

before(async () => {
  if (!process.env.ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  home = mkdtempSync(join(tmpdir(), 'abx-js-network-'));
  abxd = spawn(process.env.ABXD_BIN, ['--home', home, '--listen', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('abxd did not print its address')), 20000);
    abxd.once('exit', (code) => reject(new Error(`abxd exited early: ${code}`)));
    createInterface({ input: abxd.stdout }).on('line', (line) => {
      const m = /^listening on (\S+):(\d+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(`http://127.0.0.1:${m[2]}`);
      }
    });
  });
  baseUrl = base;
  process.env.E2B_API_URL = base;
  process.env.E2B_SANDBOX_URL = base;
  process.env.E2B_API_KEY = readFileSync(join(home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {});
  if (abxd && abxd.exitCode === null) {
    abxd.removeAllListeners('exit');
    await new Promise((resolve) => {
      abxd.once('exit', resolve);
      abxd.kill('SIGTERM');
    });
  }
  if (home) rmSync(home, { recursive: true, force: true });
});


test('create with rules: getInfo shows them in E2B field names', async () => {
  const sbx = await Sandbox.create('base', {
    network: { denyOut: [ALL_TRAFFIC], allowOut: ['198.51.100.0/24', '*.example.test'] },
  });
  made.push(sbx.sandboxId);
  const info = await sbx.getInfo();
  assert.equal(info.allowInternetAccess, true);
  assert.deepEqual(info.network.allowOut, ['198.51.100.0/24', '*.example.test']);
  assert.deepEqual(info.network.denyOut, ['0.0.0.0/0']);
  assert.equal(info.network.allowPublicTraffic, true);
});

test('allowInternetAccess false is a deny of everything', async () => {
  const sbx = await Sandbox.create('base', { allowInternetAccess: false });
  made.push(sbx.sandboxId);
  const info = await sbx.getInfo();
  assert.equal(info.allowInternetAccess, false);
  assert.deepEqual(info.network.denyOut, []);
  // Opening it up again: updateNetwork replaces the whole policy.
  await sbx.updateNetwork({ allowInternetAccess: true });
  const open = await sbx.getInfo();
  assert.equal(open.allowInternetAccess, true);
});

test('updateNetwork replaces the rules; omitted lists are cleared', async () => {
  const sbx = await Sandbox.create('base', { network: { denyOut: ['203.0.113.0/24'] } });
  made.push(sbx.sandboxId);
  await sbx.updateNetwork({ allowOut: ['api.example.test'], denyOut: [ALL_TRAFFIC] });
  let info = await sbx.getInfo();
  assert.deepEqual(info.network.allowOut, ['api.example.test']);
  assert.deepEqual(info.network.denyOut, ['0.0.0.0/0']);
  await sbx.updateNetwork({ allowOut: ['192.0.2.7'] });
  info = await sbx.getInfo();
  assert.deepEqual(info.network.allowOut, ['192.0.2.7']);
  assert.deepEqual(info.network.denyOut, []);
});

// The SDK turns the control plane's 400 into a SandboxError carrying our message.
test('bad rules are a 400 naming the entry; the old rules stay', async () => {
  await assert.rejects(
    Sandbox.create('base', { network: { allowOut: ['10.0.0.1/33'] } }),
    (e) => e instanceof SandboxError && /400.*allowOut\[0\].*prefix length/.test(e.message),
  );
  await assert.rejects(
    Sandbox.create('base', { network: { denyOut: ['example.test'] } }),
    (e) => e instanceof SandboxError && /400.*denyOut\[0\].*not domains/.test(e.message),
  );
  const sbx = await Sandbox.create('base', { network: { denyOut: ['203.0.113.9'] } });
  made.push(sbx.sandboxId);
  await assert.rejects(
    sbx.updateNetwork({ allowOut: Array.from({ length: 1001 }, (_, i) => `10.1.${i >> 8}.${i & 255}`) }),
    (e) => e instanceof SandboxError && /400.*at most 1000/.test(e.message),
  );
  const info = await sbx.getInfo();
  assert.deepEqual(info.network.denyOut, ['203.0.113.9']);
});

test('updateNetwork on a sandbox that is gone is SandboxNotFoundError', async () => {
  const sbx = await Sandbox.create('base');
  await sbx.kill();
  await assert.rejects(sbx.updateNetwork({ denyOut: [ALL_TRAFFIC] }), SandboxNotFoundError);
});
