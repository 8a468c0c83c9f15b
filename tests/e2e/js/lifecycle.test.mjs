// E2B parity of the lifecycle API, driven by the official E2B JS SDK against a real abxd:
// connect never shortens a sandbox's life, Sandbox.list is newest first, filters by state,
// metadata (with the SDK's own encoding of special characters) and startedAfter and pages with
// x-next-token; a paused sandbox wakes on traffic only with autoResume, onTimeout 'pause'
// pauses at the deadline, and the proxy answers an unknown, killed or paused sandbox with 502
// and {code, message, sandboxId}.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test lifecycle.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Sandbox } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let baseUrl;
let made;

before(async () => {
  daemon = await startAbxd('lifecycle');
  ({ baseUrl, made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
});

async function create(metadata, timeoutMs = 600_000, lifecycle = undefined) {
  const sbx = await Sandbox.create('base', { metadata, timeoutMs, lifecycle });
  made.push(sbx.sandboxId);
  return sbx;
}

test('connect with a shorter timeout keeps the later end', async () => {
  const sbx = await create({ t: 'connect' }, 3_600_000);
  const before = (await sbx.getInfo()).endAt.getTime();
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 });
  assert.equal((await sbx.getInfo()).endAt.getTime(), before);
  await sbx.setTimeout(60_000); // setTimeout still sets, shorter included
  assert.ok((await sbx.getInfo()).endAt.getTime() < before - 3_000_000);
  await sbx.kill();
});

test('Sandbox.list: newest first, state, metadata and startedAfter filters', async () => {
  const a = await create({ run: 'list', 'odd key': 'x y&z=%' });
  const startedAfter = (await a.getInfo()).startedAt;
  await new Promise((r) => setTimeout(r, 5));
  const b = await create({ run: 'list', n: '2' });
  const c = await create({ run: 'list', n: '3' });
  const ids = async (query) =>
    (await Sandbox.list({ query: { metadata: { run: 'list' }, ...query } }).nextItems()).map(
      (s) => s.sandboxId
    );
  assert.deepEqual(await ids({}), [c.sandboxId, b.sandboxId, a.sandboxId]);
  await b.pause();
  assert.deepEqual(await ids({ state: ['paused'] }), [b.sandboxId]);
  assert.deepEqual(await ids({ state: ['running'] }), [c.sandboxId, a.sandboxId]);
  assert.deepEqual(await ids({ metadata: { 'odd key': 'x y&z=%' } }), [a.sandboxId]);
  // "at or after" (E2B's spec): a's own startedAt keeps a.
  assert.deepEqual(await ids({ startedAfter }), [c.sandboxId, b.sandboxId, a.sandboxId]);
  // ...and b's leaves a out: the filter filters.
  const bStarted = (await b.getInfo()).startedAt;
  assert.deepEqual(await ids({ startedAfter: bStarted }), [c.sandboxId, b.sandboxId]);
});

test('Sandbox.list pages with limit and x-next-token', async () => {
  const mine = [];
  for (let i = 0; i < 3; i++) mine.push((await create({ run: 'pages' })).sandboxId);
  const pager = Sandbox.list({ query: { metadata: { run: 'pages' } }, limit: 2 });
  const first = (await pager.nextItems()).map((s) => s.sandboxId);
  assert.equal(first.length, 2);
  assert.equal(pager.hasNext, true);
  const second = (await pager.nextItems()).map((s) => s.sandboxId);
  assert.equal(pager.hasNext, false);
  assert.deepEqual([...first, ...second], mine.reverse());
  for (const id of mine) await Sandbox.kill(id);
});

// The proxy's answer for a sandbox it cannot reach, as the SDK's isRunning() probes it (with the
// sandbox's token, as the SDK sends it).
async function health(id, token) {
  const headers = { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' };
  if (token) headers['X-Access-Token'] = token;
  const res = await fetch(`${baseUrl}/health`, { headers });
  return { status: res.status, body: res.status === 204 ? null : await res.json() };
}

test('a paused sandbox is not woken by traffic unless created with autoResume', async () => {
  const sbx = await create({ t: 'no-resume' });
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'kill', autoResume: false });
  assert.equal(await sbx.isRunning(), true);
  assert.equal(await sbx.pause(), true);
  assert.equal(await sbx.isRunning(), false);
  const h = await health(sbx.sandboxId, sbx.envdAccessToken);
  assert.equal(h.status, 502);
  assert.equal(h.body.code, 502);
  assert.equal(h.body.sandboxId, sbx.sandboxId);
  assert.match(h.body.message, /paused/);
  assert.equal((await sbx.getInfo()).state, 'paused');
  await Sandbox.connect(sbx.sandboxId); // connect resumes
  assert.equal(await sbx.isRunning(), true);
  assert.equal((await sbx.commands.run('echo up')).stdout, 'up\n');
  await sbx.kill();
});

test('autoResume: traffic wakes a paused sandbox', async () => {
  const sbx = await create({ t: 'auto-resume' }, 600_000, { onTimeout: 'pause', autoResume: true });
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true });
  assert.equal(await sbx.pause(), true);
  assert.equal((await sbx.getInfo()).state, 'paused');
  assert.equal(await sbx.isRunning(), true); // the probe itself resumed it
  assert.equal((await sbx.getInfo()).state, 'running');
  assert.equal((await sbx.commands.run('echo awake')).stdout, 'awake\n');
  await sbx.kill();
});

test("onTimeout 'pause': the deadline pauses the sandbox instead of killing it", async () => {
  const sbx = await create({ t: 'pause-on-timeout' }, 1_000, { onTimeout: 'pause' });
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
  let state = 'running';
  for (let i = 0; i < 200 && state === 'running'; i++) {
    await new Promise((r) => setTimeout(r, 100));
    state = (await sbx.getInfo()).state;
  }
  assert.equal(state, 'paused');
  assert.equal(await sbx.isRunning(), false);
  const listed = await Sandbox.list({ query: { metadata: { t: 'pause-on-timeout' } } }).nextItems();
  assert.deepEqual(
    listed.map((s) => [s.sandboxId, s.state]),
    [[sbx.sandboxId, 'paused']]
  );
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
  assert.equal((await sbx.getInfo()).state, 'running');
  assert.equal((await sbx.commands.run('echo back')).stdout, 'back\n');
  await sbx.kill();
});

test('an unknown or killed sandbox: 502 with code, message and sandboxId', async () => {
  const sbx = await create({ t: 'killed' });
  await sbx.kill();
  assert.equal(await sbx.isRunning(), false);
  for (const id of [sbx.sandboxId, 'abcdefghij0123456789']) {
    const h = await health(id, sbx.envdAccessToken);
    assert.equal(h.status, 502);
    assert.equal(h.body.code, 502);
    assert.equal(h.body.sandboxId, id);
    assert.match(h.body.message, /not found/);
  }
  // The SDK reads the proxy's 502 on a command's stream as "not running anymore".
  await assert.rejects(sbx.commands.run('true'), (e) => e.name === 'SandboxNotFoundError');
});

test('getMetrics: 5-second samples, filtered by start and end', async () => {
  const sbx = await create({ t: 'metrics' });
  const all = await sbx.getMetrics();
  assert.ok(all.length >= 1); // the first sample is taken at create
  for (const m of all) {
    assert.ok(m.timestamp instanceof Date);
    assert.equal(typeof m.cpuUsedPct, 'number');
    assert.ok(m.memTotal > 0);
  }
  const first = all[0].timestamp.getTime();
  assert.deepEqual(await sbx.getMetrics({ end: new Date(first - 10_000) }), []);
  assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) }), []);
  const inRange = await sbx.getMetrics({
    start: new Date(first - 10_000),
    end: new Date(first + 500),
  });
  assert.ok(inRange.some((m) => m.timestamp.getTime() === first));
  await sbx.kill();
});
