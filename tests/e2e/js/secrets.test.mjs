// E2B's secrets (issue 39 item 5) through the official SDK's Secret class, against a real abxd:
// create, getInfo (by id and by name), list (paged), update (a new version), exists, destroy,
// the SDK's error classes, and Secret.fill's placeholder in a sandbox's network.rules (accepted
// for a secret of the team; a 400 naming the header for a missing one; destroy refused while a
// live sandbox names it). No answer carries a value. What the proxy sends upstream is
// tests/e2e/network/secrets.sh's (it needs the test's own internet).
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test secrets.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Sandbox, Secret, SecretError, SecretNotFoundError, SandboxError } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let baseUrl;
let made;

before(async () => {
  daemon = await startAbxd('secrets');
  ({ baseUrl, made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
});

const value1 = `sk-js-${Math.random().toString(16).slice(2)}`;
const value2 = `sk-js-${Math.random().toString(16).slice(2)}`;

test('Secret: create, getInfo, list, update, exists, destroy; never a value', async () => {
  const info = await Secret.create('JS-Token', value1, { metadata: { env: 'test' } });
  assert.match(info.secretId, /^sec_[0-9a-f]{24}$/);
  assert.equal(info.name, 'js-token'); // lower-cased, as E2B
  assert.equal(info.version, 1);
  assert.deepEqual(info.metadata, { env: 'test' });
  assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()));

  const byId = await Secret.getInfo(info.secretId);
  const byName = await Secret.getInfo('js-token');
  assert.equal(byId.secretId, info.secretId);
  assert.equal(byName.secretId, info.secretId);

  await Secret.create('another', 'v');
  const paginator = Secret.list({ limit: 1 });
  const names = [];
  while (paginator.hasNext) names.push(...(await paginator.nextItems()).map((s) => s.name));
  assert.deepEqual(names, ['another', 'js-token']);

  const updated = await Secret.update(info.secretId, value2);
  assert.equal(updated.version, 2);
  assert.deepEqual(updated.metadata, { env: 'test' }); // kept when not given
  assert.equal((await Secret.update('js-token', value2, { metadata: {} })).version, 3);

  assert.equal(await Secret.exists('js-token'), true);
  assert.equal(await Secret.exists('no-such-secret'), false);
  await assert.rejects(Secret.getInfo('no-such-secret'), SecretNotFoundError);
  await assert.rejects(Secret.update('no-such-secret', 'v'), SecretNotFoundError);
  await assert.rejects(Secret.create('js-token', 'v'), (e) => e instanceof SecretError && /409/.test(e.message));
  await assert.rejects(Secret.create('sec_reserved', 'v'), (e) => e instanceof SecretError && /400: name/.test(e.message));

  assert.equal(await Secret.destroy('another'), true);
  assert.equal(await Secret.destroy('another'), false);

  // No answer of the API holds a value (raw fetch, every read route).
  const key = { 'X-API-Key': process.env.E2B_API_KEY };
  for (const path of ['/secrets', `/secrets/${info.secretId}`, '/secrets/js-token']) {
    const text = await (await fetch(`${baseUrl}${path}`, { headers: key })).text();
    assert.ok(!text.includes(value1) && !text.includes(value2), `${path}: ${text}`);
  }
});

test('Secret.fill in network.rules: a missing secret is a 400 naming the header; in use: no destroy', async () => {
  assert.equal(Secret.fill('js-token'), '${e2b.secrets.js-token}');
  const rules = (name) => ({
    'api.example.test': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }],
  });
  await assert.rejects(
    Sandbox.create('base', { timeoutMs: 600_000, network: { rules: rules('missing') } }),
    (e) => e instanceof SandboxError && e.message.includes(
      'network.rules["api.example.test"][0].transform.headers["Authorization"]: secret \'missing\' not found'),
  );
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000, network: { rules: rules('js-token') } });
  made.push(sbx.sandboxId);
  const res = await fetch(`${baseUrl}/sandboxes/${sbx.sandboxId}`, {
    headers: { 'X-API-Key': process.env.E2B_API_KEY },
  });
  const text = await res.text();
  assert.ok(text.includes('"Authorization":"Bearer ${e2b.secrets.js-token}"'), text);
  assert.ok(!text.includes(value2), text);
  await assert.rejects(Secret.destroy('js-token'), (e) => e instanceof SecretError && /409/.test(e.message) && e.message.includes(sbx.sandboxId));
  await sbx.kill();
  assert.equal(await Secret.destroy('js-token'), true);
});
