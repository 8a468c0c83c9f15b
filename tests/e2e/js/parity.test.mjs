// Smaller E2B parity items (issue 16), against a real abxd with real sandboxes:
// - GET /templates/aliases/{alias}, through the official SDK's Template.exists (200 for a
//   template that exists, 404 for one that does not) and its body shape {templateID, public};
// - abxd's metrics samples carry the writable layer's disk usage and CPU usage, 5 s apart;
// - envd's GET /envs (the sandbox's default environment) and GET /metrics (E2B's field names),
//   which the SDK does not call, fetched through abxd's proxy with the SDK's envd token.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test parity.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';

import { Sandbox, Template } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let baseUrl;
let made;

before(async () => {
  daemon = await startAbxd('parity');
  ({ baseUrl, made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
});

async function create(opts = {}) {
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000, ...opts });
  made.push(sbx.sandboxId);
  return sbx;
}

// A request to envd inside the sandbox through abxd's proxy (the SDK's routing headers).
async function envd(sbx, path, { token = sbx.envdAccessToken, method = 'GET' } = {}) {
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' };
  if (token) headers['X-Access-Token'] = token;
  const res = await fetch(`${baseUrl}${path}`, { method, headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

test('Template.exists: GET /templates/aliases/{alias} is 200 for a template, 404 otherwise', async () => {
  assert.equal(await Template.exists('base'), true);
  assert.equal(await Template.exists('no-such-template-here'), false);
  const key = { 'X-API-Key': process.env.E2B_API_KEY };
  let res = await fetch(`${baseUrl}/templates/aliases/base`, { headers: key });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { templateID: 'base', public: true });
  res = await fetch(`${baseUrl}/templates/aliases/no-such-template-here`, { headers: key });
  assert.equal(res.status, 404);
  const err = await res.json();
  assert.equal(err.code, 404);
  assert.match(err.message, /no-such-template-here/);
  res = await fetch(`${baseUrl}/templates/aliases/base`); // no key
  assert.equal(res.status, 401);
});

test('getMetrics: disk usage of the writable layer and CPU usage', async () => {
  const sbx = await create();
  const [first] = await sbx.getMetrics();
  assert.ok(first.diskTotal > 0);
  assert.ok(first.diskUsed >= 0 && first.diskUsed <= first.diskTotal);
  // 32 MiB on disk and ~3 s of one busy CPU, then the next 5-second sample.
  await sbx.commands.run(
    'dd if=/dev/zero of=/home/user/fill bs=1M count=32 conv=fsync status=none && ' +
      'end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do :; done',
    { timeoutMs: 30_000 },
  );
  const t0 = first.timestamp.getTime();
  let later = [];
  for (let i = 0; i < 40 && later.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 500));
    later = (await sbx.getMetrics()).filter((m) => m.timestamp.getTime() > t0 + 3_000);
  }
  assert.ok(later.length > 0, 'no sample after the work');
  const last = later[later.length - 1];
  assert.ok(last.diskUsed >= first.diskUsed + 30 * 2 ** 20, `diskUsed ${last.diskUsed}`);
  assert.ok(last.diskUsed <= last.diskTotal);
  assert.equal(last.diskTotal, first.diskTotal);
  assert.ok(later.some((m) => m.cpuUsedPct > 0), 'cpuUsedPct stayed 0 while a CPU was busy');
  // Each sandbox samples on its own 5-second rhythm from its create: no second sample right
  // after the first when abxd's reaper happens to tick then.
  const ts = (await sbx.getMetrics()).map((m) => m.timestamp.getTime());
  for (let i = 1; i < ts.length; i++) assert.ok(ts[i] - ts[i - 1] >= 4_900, `samples ${ts}`);
  await sbx.kill();
});

test("envd's GET /envs and GET /metrics through the proxy", async () => {
  const sbx = await create({ envs: { PARITY_VAR: 'hello world' } });
  let r = await envd(sbx, '/envs');
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('cache-control'), 'no-store');
  assert.equal(r.body.PARITY_VAR, 'hello world');
  assert.equal(r.body.E2B_SANDBOX_ID, sbx.sandboxId);
  assert.equal(r.body.ABX_ACCESS_TOKEN, undefined); // envd never hands its token on
  // What /envs lists is what a command starts with.
  const out = await sbx.commands.run('printf %s "$PARITY_VAR"');
  assert.equal(out.stdout, 'hello world');

  r = await envd(sbx, '/metrics');
  assert.equal(r.status, 200);
  const m = r.body;
  for (const k of ['ts', 'cpu_count', 'cpu_used_pct', 'mem_total', 'mem_used', 'disk_used', 'disk_total']) {
    assert.equal(typeof m[k], 'number', k);
  }
  assert.ok(Math.abs(m.ts - Date.now() / 1000) < 30);
  assert.ok(m.cpu_count >= 1);
  assert.ok(m.mem_used > 0 && m.mem_used <= m.mem_total);
  // The root filesystem is the writable layer: its size is the template's disk quota, as in
  // abxd's samples.
  const [sample] = await sbx.getMetrics();
  assert.equal(m.disk_total, sample.diskTotal);
  assert.ok(m.disk_used <= m.disk_total);

  // abxd's proxy needs the envd token before anything reaches envd.
  r = await envd(sbx, '/envs', { token: 'wrong' });
  assert.equal(r.status, 401);
  await sbx.kill();
});

// Signed file URLs (issue 39 item 1) as the SDK makes them, fetched as a browser or curl would:
// with E2B_SANDBOX_URL the URL is abxd's own address and names no sandbox, so abxd finds the
// sandbox whose envd token made the signature; the host form ({port}-{id}.{domain}) and the
// routing headers reach the same envd. envd answers as E2B's does: 200, or 401 with its words.
test('signed download and upload URLs on every routing form', async () => {
  const sbx = await create();
  await sbx.files.write('/tmp/signed/d.txt', 'signed download');
  await sbx.commands.run('install -m 600 /dev/null /root/secret && echo root-only > /root/secret', {
    user: 'root',
  });
  const text = async (res) => [res.status, await res.text()];
  const refused = async (res, message) => {
    assert.equal(res.status, 401);
    assert.deepEqual(await res.json(), { code: 401, message });
  };

  // The documented setup: the URL alone, no headers.
  const down = await sbx.downloadUrl('/tmp/signed/d.txt');
  assert.ok(down.startsWith(`${baseUrl}/files?`), down);
  assert.deepEqual(await text(await fetch(down)), [200, 'signed download']);
  const expiring = await sbx.downloadUrl('/tmp/signed/d.txt', { useSignatureExpiration: 60 });
  assert.match(expiring, /signature_expiration=\d+/);
  assert.deepEqual(await text(await fetch(expiring)), [200, 'signed download']);
  await refused(
    await fetch(await sbx.downloadUrl('/tmp/signed/d.txt', { useSignatureExpiration: -5 })),
    'signature is already expired',
  );
  await refused(await fetch(down.replace('signature=v1_', 'signature=v1_x')), 'invalid signature');
  // As root: the user is part of what is signed.
  const asRoot = await sbx.downloadUrl('/root/secret', { user: 'root' });
  assert.match(asRoot, /username=root/);
  assert.deepEqual(await text(await fetch(asRoot)), [200, 'root-only\n']);
  await refused(await fetch(asRoot.replace('username=root', 'username=user')), 'invalid signature');
  const asUser = new URL(await sbx.downloadUrl('/root/secret'));
  asUser.searchParams.set('username', 'root');
  await refused(await fetch(asUser), 'invalid signature');
  // Upload: a multipart form to the URL; a write signature does not read.
  const up = await sbx.uploadUrl('/tmp/signed/u.txt');
  const form = new FormData();
  form.append('file', new Blob(['signed upload']), 'u.txt');
  let res = await fetch(up, { method: 'POST', body: form });
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal((await res.json())[0].path, '/tmp/signed/u.txt');
  assert.equal(await sbx.files.read('/tmp/signed/u.txt'), 'signed upload');
  await refused(await fetch(up), 'invalid signature');
  // Another sandbox's token signs nothing here, and a secure: false sandbox is not signed for.
  const other = await create();
  const foreign = await other.downloadUrl('/tmp/signed/d.txt');
  assert.equal((await fetch(foreign)).status, 404); // routed to the other sandbox: no such file
  await other.kill();
  await refused(await fetch(foreign), 'invalid signature'); // no live sandbox signed it now

  // The routing headers (what the SDK itself sends) reach the same envd.
  const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' };
  assert.deepEqual(await text(await fetch(down, { headers: route })), [200, 'signed download']);
  await refused(
    await fetch(down.replace('signature=v1_', 'signature=v1_x'), { headers: route }),
    'invalid signature',
  );

  // The host form: without E2B_SANDBOX_URL the SDK builds https://49983-{id}.{domain}/files?…
  // (its direct URL); sent here as plain HTTP to abxd with that Host.
  const saved = process.env.E2B_SANDBOX_URL;
  delete process.env.E2B_SANDBOX_URL;
  let direct;
  try {
    direct = await Sandbox.connect(sbx.sandboxId);
  } finally {
    process.env.E2B_SANDBOX_URL = saved;
  }
  const hostUrl = new URL(await direct.downloadUrl('/tmp/signed/d.txt', { useSignatureExpiration: 60 }));
  assert.equal(hostUrl.host, `49983-${sbx.sandboxId}.localhost`);
  const viaHost = (path) =>
    new Promise((resolve, reject) => {
      const req = http.get(
        { host: '127.0.0.1', port: new URL(baseUrl).port, path, headers: { Host: hostUrl.host } },
        (r) => {
          let body = '';
          r.on('data', (c) => (body += c));
          r.on('end', () => resolve([r.statusCode, body]));
        },
      );
      req.on('error', reject);
    });
  assert.deepEqual(await viaHost(hostUrl.pathname + hostUrl.search), [200, 'signed download']);
  const [status, body] = await viaHost(
    hostUrl.pathname + hostUrl.search.replace('signature=v1_', 'signature=v1_x'),
  );
  assert.equal(status, 401);
  assert.equal(JSON.parse(body).message, 'invalid signature');
  await sbx.kill();
});

// Create fields and options abxd does not implement (issue 39 item 6) are refused with E2B's
// error shape (400 {code, message}), never silently ignored; the sandbox is not created.
test('unsupported create fields are refused, not ignored', async () => {
  const before = (await Sandbox.list().nextItems()).length;
  const refused = async (promise, pattern) => {
    await assert.rejects(promise, (e) => {
      assert.match(e.message, /^400: /);
      assert.match(e.message, pattern);
      return true;
    });
  };
  await refused(
    Sandbox.create('base', { mcp: { github: { githubPersonalAccessToken: 'x' } } }),
    /mcp is not supported/,
  );
  await refused(
    Sandbox.create('base', {
      network: { egressProxy: { address: 'proxy.example.com:1080', username: 'u', password: 'p' } },
    }),
    /egressProxy is not supported/,
  );
  await refused(Sandbox.create('base', { network: { httpsPorts: [3000] } }), /httpsPorts is not supported/);
  // (volumeMounts is supported: volumes.test.mjs.)
  // A filesystem-only pause with autoResume: the SDK refuses it itself; abxd too, as E2B's API.
  const res = await fetch(`${baseUrl}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      templateID: 'base', autoPause: true, autoPauseMemory: false, autoResume: { enabled: true },
    }),
  });
  assert.equal(res.status, 400);
  assert.match((await res.json()).message, /autoResume cannot be combined with autoPauseMemory false/);
  assert.equal((await Sandbox.list().nextItems()).length, before);
});

// --- E2B's filesystem-only pause (issue 39 item 2) -------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The commands running in the sandbox whose command line has `marker` (envd's process list).
async function running(sbx, marker) {
  return (await sbx.commands.list()).filter((p) => [p.cmd, ...(p.args ?? [])].join(' ').includes(marker));
}

const kept = (id) => join(daemon.home, 'checkpoints', id);

test('pause({keepMemory: false}) keeps the files and ends the processes; connect boots it again', async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/kept.txt', 'kept across the pause');
  await sbx.commands.run('sleep 4242', { background: true });
  assert.equal((await running(sbx, 'sleep 4242')).length, 1);
  const bootBefore = (await sbx.commands.run('cat /proc/1/stat')).stdout.split(' ')[21];

  assert.equal(await sbx.pause({ keepMemory: false }), true);
  assert.equal(await sbx.pause({ keepMemory: false }), false); // already paused: the SDK's 409
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  // Its processes are gone (no state dir: no cgroup, no layer mount); its layer is kept, no
  // memory checkpoint is made.
  assert.ok(existsSync(join(kept(sbx.sandboxId), 'rw.img')));
  assert.ok(!existsSync(join(kept(sbx.sandboxId), 'checkpoint.json')));
  assert.ok(!existsSync(join(daemon.home, 'sandboxes', sbx.sandboxId)));
  const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId));
  // Forks and snapshots need its processes: refused (409) while it is paused.
  await assert.rejects(sbx.createSnapshot(), /paused|CRIU/);

  // The record survives abxd being killed.
  await daemon.restart('SIGKILL');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');

  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal(again.sandboxId, sbx.sandboxId);
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
  assert.ok(!existsSync(kept(sbx.sandboxId)));
  // The old handle's token still works; the files are there, the old process is not, and the
  // init is a new one (another start time); commands run.
  assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept across the pause');
  assert.deepEqual(await running(sbx, 'sleep 4242'), []);
  assert.notEqual((await sbx.commands.run('cat /proc/1/stat')).stdout.split(' ')[21], bootBefore);
  assert.equal((await sbx.commands.run('hostname')).stdout.trim(), sbx.sandboxId);
  assert.equal((await sbx.commands.run('echo booted')).stdout, 'booted\n');
  // ... and it can be paused that way again, and killed while paused: its layer goes.
  assert.equal(await sbx.pause({ keepMemory: false }), true);
  assert.ok(existsSync(join(kept(sbx.sandboxId), 'rw.img')));
  assert.equal(await Sandbox.kill(sbx.sandboxId), true);
  assert.ok(!existsSync(kept(sbx.sandboxId)));
});

// E2B's resume {memory: false}: "cold-boots fresh and any memory in the snapshot is ignored,
// never modified or deleted". Paused to disk (CRIU here): a boot on a copy of the checkpoint's
// layer, the checkpoint as it was; paused in RAM (no CRIU): refused (400), nothing changed.
test('connect({onResume: "reboot"}) of a sandbox paused with its memory boots on its files, the checkpoint untouched', async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/kept.txt', 'kept for the reboot');
  await sbx.commands.run('sleep 4343', { background: true });
  assert.equal(await sbx.pause(), true);
  const dir = kept(sbx.sandboxId);
  const onDisk = existsSync(join(dir, 'checkpoint.json')); // --pause auto: disk where CRIU works
  // Each entry's inode, size and mtime, and the content of every file but the (sparse, large)
  // layer, whose mtime would move with any write.
  const snapshot = () => Object.fromEntries(readdirSync(dir).map((f) => {
    const st = lstatSync(join(dir, f));
    const small = st.isFile() && st.size < (16 << 20);
    return [f, [st.ino, st.size, st.mtimeMs, small ? readFileSync(join(dir, f)).toString('base64') : '']];
  }));
  const before = onDisk ? snapshot() : null;
  if (!onDisk) {
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' }), (e) => {
      assert.match(e.message, /^400: /);
      assert.match(e.message, /is paused in RAM/);
      return true;
    });
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
    await Sandbox.connect(sbx.sandboxId); // a plain connect thaws it, its process with it
    assert.equal((await running(sbx, 'sleep 4343')).length, 1);
    await sbx.kill();
    return;
  }
  await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
  assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept for the reboot');
  assert.deepEqual(await running(sbx, 'sleep 4343'), []); // the memory was not restored
  // The checkpoint is exactly as it was: every file, byte for byte (its layer copied, not used).
  assert.deepEqual(snapshot(), before);
  // onResume 'reboot' of a running sandbox is a no-op (E2B).
  await sbx.commands.run('sleep 4545', { background: true });
  await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
  assert.equal((await running(sbx, 'sleep 4545')).length, 1);
  // The next pause replaces the leftover checkpoint; the kill removes everything.
  assert.equal(await sbx.pause(), true);
  await Sandbox.connect(sbx.sandboxId);
  assert.equal((await running(sbx, 'sleep 4545')).length, 1);
  await sbx.kill();
  assert.ok(!existsSync(dir));
});

test('lifecycle onTimeout {pause, keepMemory: false}: the deadline pauses filesystem-only', async () => {
  const sbx = await create({ timeoutMs: 5_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
  await sbx.files.write('/home/user/before-timeout.txt', 'written before the deadline');
  await sbx.commands.run('sleep 4444', { background: true });
  let state;
  for (let i = 0; i < 100 && state !== 'paused'; i++) {
    await sleep(200);
    state = (await Sandbox.getInfo(sbx.sandboxId)).state;
  }
  assert.equal(state, 'paused');
  assert.ok(existsSync(join(kept(sbx.sandboxId), 'rw.img')));
  assert.ok(!existsSync(join(kept(sbx.sandboxId), 'checkpoint.json')));
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
  assert.equal(await sbx.files.read('/home/user/before-timeout.txt'), 'written before the deadline');
  assert.deepEqual(await running(sbx, 'sleep 4444'), []);
  await sbx.kill();
});

test('traffic does not resume a filesystem-only pause (autoResume); connect does', async () => {
  const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } });
  await sbx.files.write('/home/user/f.txt', 'f');
  assert.equal(await sbx.pause({ keepMemory: false }), true);
  const res = await fetch(`${baseUrl}/files?path=/home/user/f.txt`, {
    headers: {
      'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken,
    },
  });
  assert.equal(res.status, 502);
  const err = await res.json();
  assert.match(err.message, /paused without its memory/);
  assert.equal(err.sandboxId, sbx.sandboxId);
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  await Sandbox.connect(sbx.sandboxId);
  assert.equal(await sbx.files.read('/home/user/f.txt'), 'f');
  await sbx.kill();
});
