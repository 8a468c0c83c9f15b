// E2B parity of the lifecycle API, driven by the official E2B JS SDK against a real abxd:
// connect never shortens a sandbox's life, Sandbox.list is newest first and filters by state,
// metadata (with the SDK's own encoding of special characters) and startedAfter.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test lifecycle.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { Sandbox } from 'e2b';

let abxd;
let home;
const made = [];

before(async () => {
  if (!process.env.ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  home = mkdtempSync(join(tmpdir(), 'abx-js-lifecycle-'));
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

async function create(metadata, timeoutMs = 600_000) {
  const sbx = await Sandbox.create('base', { metadata, timeoutMs });
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
  assert.deepEqual(await ids({ startedAfter }), [c.sandboxId, b.sandboxId]);
});
