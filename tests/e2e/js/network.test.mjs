// The E2B network API, driven by the official E2B JS SDK against a real abxd: create with
// network {allowOut, denyOut, allowPublicTraffic} and allowInternetAccess, what getInfo shows,
// updateNetwork (which replaces the whole policy), and the SDK's errors for bad rules and for a
// sandbox that is gone. No traffic leaves the host: traffic itself is tests/e2e/network's job.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test network.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { ALL_TRAFFIC, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let baseUrl;
let made;

before(async () => {
  daemon = await startAbxd('network');
  ({ baseUrl, made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
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

// network.rules (issue 40): E2B's header transforms. Traffic through them is
// tests/e2e/network/rules.sh's job; here, what the SDK sends and gets back.
test('network.rules: accepted on create, shown masked, replaced and cleared by updateNetwork', async () => {
  const secret = 'Bearer sdk-secret-value';
  const sbx = await Sandbox.create('base', {
    network: {
      rules: {
        'API.example.test': [{ transform: { headers: { Authorization: secret } } }],
        '*.example.test': [{ transform: { headers: { 'X-Key': 'k' } } }],
      },
    },
  });
  made.push(sbx.sandboxId);
  let info = await sbx.getInfo();
  // Keys lower-cased, values masked: GET never returns a credential.
  assert.deepEqual(Object.keys(info.network.rules).sort(), ['*.example.test', 'api.example.test']);
  assert.deepEqual(info.network.rules['api.example.test'], [
    { transform: { headers: { Authorization: '[redacted]' } } },
  ]);
  assert.ok(!JSON.stringify(info).includes('sdk-secret-value'));
  // The callback form (a placeholder resolver) arrives as a static transform.
  await sbx.updateNetwork({
    rules: { 'v1.example.test': [{ transform: () => ({ headers: { 'X-Other': 'o' } }) }] },
  });
  info = await sbx.getInfo();
  assert.deepEqual(Object.keys(info.network.rules), ['v1.example.test']);
  // Omitted: cleared (updateNetwork replaces the whole configuration).
  await sbx.updateNetwork({ allowOut: ['192.0.2.7'] });
  info = await sbx.getInfo();
  assert.equal(info.network.rules, undefined);
});

test('network.rules: bad patterns and headers are a 400 naming the field', async () => {
  for (const [rules, field] of [
    [{ '*': [] }, /rules\["\*"\]/],
    [{ 'a.test': [{ transform: { headers: { '': 'v' } } }] }, /headers\[""\].*empty/],
    [{ 'a.test': [{ transform: { headers: { X: 'a\r\nB: c' } } }] }, /headers\["X"\].*CR or LF/],
  ]) {
    await assert.rejects(
      Sandbox.create('base', { network: { rules } }),
      (e) => e instanceof SandboxError && /400/.test(e.message) && field.test(e.message),
      JSON.stringify(rules),
    );
  }
});

test('updateNetwork on a sandbox that is gone is SandboxNotFoundError', async () => {
  const sbx = await Sandbox.create('base');
  await sbx.kill();
  await assert.rejects(sbx.updateNetwork({ denyOut: [ALL_TRAFFIC] }), SandboxNotFoundError);
});
