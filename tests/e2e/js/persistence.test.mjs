// Persistence (issue 14), driven by the official E2B JS SDK against a real abxd whose pause
// goes to disk (CRIU): a sandbox whose background process counts in memory is paused (its
// processes and memory freed, a checkpoint under <home>/checkpoints), survives an abxd restart
// and a kill -9 of abxd, and comes back on connect with the same id, token, files and the
// counter going on from where it was; fork makes children that diverge independently; a
// snapshot creates new sandboxes and is listed and deleted as E2B's are.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test persistence.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  appendFileSync, copyFileSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

import { Sandbox } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let made;

// CRIU comes from scripts/install-criu.sh (install-deps.sh runs it and warns when it fails).
const criu = process.env.ABX_CRIU ?? '/usr/local/lib/abx/criu/criu';
const skip = existsSync(criu) ? false : `CRIU is not installed at ${criu} (scripts/install-criu.sh)`;

before(async () => {
  if (skip) return;
  daemon = await startAbxd('persistence', ['--pause', 'disk']);
  ({ made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function create(opts = {}) {
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000, ...opts });
  made.push(sbx.sandboxId);
  return sbx;
}

// A shell loop that counts in its own memory and writes each value to /tmp/n: after a restore
// it must go on from where it was (a restarted loop would begin at 1 again). Each value is
// renamed into place: a checkpoint taken between `>`'s truncation and echo's write would
// otherwise hold an empty /tmp/n, which reads as 0.
async function startCounter(sbx) {
  const loop = 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.02; done';
  await sbx.commands.run(loop, { background: true });
  for (let tries = 0; tries < 200; tries++) {
    const n = await count(sbx).catch(() => 0);
    if (n > 5) return n;
    await sleep(20);
  }
  throw new Error('the counter did not start');
}

async function count(sbx) {
  return Number((await sbx.files.read('/tmp/n')).trim());
}

// The counter is alive and moving on from at least `from`.
async function assertCounting(sbx, from) {
  const a = await count(sbx);
  assert.ok(a >= from, `counter went back: ${a} < ${from}`);
  for (let tries = 0; tries < 100; tries++) {
    await sleep(20);
    if ((await count(sbx)) > a) return a;
  }
  assert.fail('the counter stopped');
}

test('pause goes to disk and connect brings back processes, memory, files and token', { skip }, async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/kept.txt', 'kept across the pause');
  const before = await startCounter(sbx);
  assert.equal(await sbx.pause(), true);
  assert.equal(await sbx.pause(), false); // already paused: the SDK's 409 contract
  const info = await Sandbox.getInfo(sbx.sandboxId);
  assert.equal(info.state, 'paused');
  // Its processes are gone (no state dir, no cgroup); the checkpoint holds them.
  assert.ok(existsSync(join(daemon.home, 'checkpoints', sbx.sandboxId, 'checkpoint.json')));
  assert.ok(!existsSync(join(daemon.home, 'sandboxes', sbx.sandboxId)));
  const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId));

  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal(again.sandboxId, sbx.sandboxId);
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
  assert.ok(!existsSync(join(daemon.home, 'checkpoints', sbx.sandboxId)));
  // The old handle's token still works: same token, same files, the same counting process.
  assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept across the pause');
  await assertCounting(sbx, before);
  const r = await sbx.commands.run('hostname');
  assert.equal(r.stdout.trim(), sbx.sandboxId);
  await sbx.kill();
});

test('a sandbox paused to disk survives abxd restarts (SIGTERM and kill -9)', { skip }, async () => {
  const sbx = await create();
  const before = await startCounter(sbx);
  assert.equal(await sbx.pause(), true);
  await daemon.restart('SIGTERM');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  await daemon.restart('SIGKILL');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  await Sandbox.connect(sbx.sandboxId);
  const seen = await assertCounting(sbx, before);
  // And the other way: paused again, abxd killed, resumed by the next one.
  assert.equal(await sbx.pause(), true);
  await daemon.restart('SIGKILL');
  await Sandbox.connect(sbx.sandboxId);
  await assertCounting(sbx, seen);
  await sbx.kill();
});

test('killing a paused sandbox deletes its checkpoint', { skip }, async () => {
  const sbx = await create();
  assert.equal(await sbx.pause(), true);
  assert.ok(existsSync(join(daemon.home, 'checkpoints', sbx.sandboxId)));
  assert.equal(await Sandbox.kill(sbx.sandboxId), true);
  assert.ok(!existsSync(join(daemon.home, 'checkpoints', sbx.sandboxId)));
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);
});

test('fork: 4 children with their own id, token, hostname and files diverge', { skip }, async () => {
  const parent = await create();
  await parent.files.write('/home/user/origin.txt', 'parent');
  const before = await startCounter(parent);
  const children = await parent.fork({ count: 4 });
  assert.equal(children.length, 4);
  for (const c of children) {
    assert.ok(c instanceof Sandbox, `a fork failed: ${c}`);
    made.push(c.sandboxId);
  }
  const ids = new Set([parent.sandboxId, ...children.map((c) => c.sandboxId)]);
  assert.equal(ids.size, 5);
  // The parent runs on, untouched.
  assert.equal((await Sandbox.getInfo(parent.sandboxId)).state, 'running');
  await assertCounting(parent, before);
  for (const [i, c] of children.entries()) {
    assert.equal(await c.files.read('/home/user/origin.txt'), 'parent');
    assert.equal((await c.commands.run('hostname')).stdout.trim(), c.sandboxId);
    const id = await c.commands.run('echo $E2B_SANDBOX_ID');
    assert.equal(id.stdout.trim(), c.sandboxId);
    await assertCounting(c, before); // each child has its own copy of the counting process
    await c.files.write('/home/user/origin.txt', `child ${i}`);
  }
  // A child's token is its own: another sandbox's token is refused there.
  assert.ok(parent.envdAccessToken);
  const wrong = await fetch(`${daemon.baseUrl}/envs`, {
    headers: {
      'E2b-Sandbox-Id': children[0].sandboxId,
      'E2b-Sandbox-Port': '49983',
      'X-Access-Token': parent.envdAccessToken,
    },
  });
  assert.equal(wrong.status, 401);
  for (const [i, c] of children.entries())
    assert.equal(await c.files.read('/home/user/origin.txt'), `child ${i}`);
  assert.equal(await parent.files.read('/home/user/origin.txt'), 'parent');
  await children[1].kill();
  assert.equal((await children[2].commands.run('echo alive')).stdout.trim(), 'alive');
  for (const c of children) await c.kill().catch(() => {});
  await parent.kill();
});

// A user process with an inotify watch on /home/user/w, as a dev server's reloader has one
// (inotify through ctypes): it appends each name its watch reports to /tmp/seen.
const watcherScript = `
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
assert libc.inotify_add_watch(fd, b'/home/user/w', 0x100 | 0x80) >= 0  # IN_CREATE | IN_MOVED_TO
open('/tmp/watching', 'w').close()
while True:
    buf = os.read(fd, 4096)
    i = 0
    while i < len(buf):
        n = struct.unpack_from('iIII', buf, i)[3]
        with open('/tmp/seen', 'a') as f:
            f.write(buf[i + 16:i + 16 + n].rstrip(b'\\0').decode() + '\\n')
        i += 16 + n
`;

async function startWatcher(sbx) {
  await sbx.files.makeDir('/home/user/w');
  await sbx.files.write('/tmp/watcher.py', watcherScript);
  await sbx.commands.run('python3 /tmp/watcher.py', { background: true });
  for (let tries = 0; tries < 200; tries++) {
    if (await sbx.files.exists('/tmp/watching')) return;
    await sleep(20);
  }
  throw new Error('the watcher did not start');
}

// Until `pred` holds (10 s at most).
async function eventually(pred, what) {
  for (let tries = 0; tries < 500; tries++) {
    if (await pred()) return;
    await sleep(20);
  }
  assert.fail(`never: ${what}`);
}

// Creates /home/user/w/<name> and checks that the user process's watch reports it, and that a
// new watchDir of envd sees a change there too.
async function assertWatched(sbx, name) {
  const seen = [];
  const handle = await sbx.files.watchDir('/home/user/w', (e) => seen.push(e.name));
  try {
    await sbx.files.write(`/home/user/w/${name}`, name);
    await eventually(async () => (await sbx.files.read('/tmp/seen').catch(() => '')).split('\n').includes(name),
      `the user process's watch reports ${name} in ${sbx.sandboxId}`);
    await eventually(() => seen.includes(name), `envd's new watch reports ${name}; saw ${seen}`);
  } finally {
    await handle.stop();
  }
}

// Issue 41: after the SDK's watchDir had run (even stopped), and with any user process holding
// an inotify watch, every pause, fork and snapshot failed for good ("criu: fsnotify: Can't dump
// that handle"). Watches of envd (a stopped one and a live one) and of a user process survive
// all three, and report changes made after each.
test('inotify watches of envd and of a user process survive pause, fork and snapshot', { skip }, async () => {
  const sbx = await create();
  await startWatcher(sbx);
  const stopped = await sbx.files.watchDir('/home/user/w', () => {});
  await stopped.stop();
  const live = [];
  let heldEnded = false;
  const held = await sbx.files.watchDir('/home/user/w', (e) => live.push(e.name), {
    onExit: () => { heldEnded = true; },
  });
  await assertWatched(sbx, 'before');
  await eventually(() => live.includes('before'), `the held watch reports before; saw ${live}`);

  assert.equal(await sbx.pause(), true);
  await Sandbox.connect(sbx.sandboxId);
  await assertWatched(sbx, 'after-resume');
  // The held watch's stream, as every connection through abxd, did not outlive the pause: its
  // client is told (onExit) and watches again.
  await eventually(() => heldEnded, 'the held watch was told that its stream ended');

  const [child] = await sbx.fork({ count: 1 });
  assert.ok(child instanceof Sandbox, `the fork failed: ${child}`);
  made.push(child.sandboxId);
  await assertWatched(child, 'in-the-fork');
  await assertWatched(sbx, 'after-the-fork');

  const snap = await sbx.createSnapshot();
  const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
  made.push(fromSnap.sandboxId);
  await assertWatched(fromSnap, 'from-the-snapshot');
  await assertWatched(sbx, 'after-the-snapshot');
  await held.stop();
  for (const s of [fromSnap, child, sbx]) await s.kill();
  await Sandbox.deleteSnapshot(snap.snapshotId);
});

// A watch CRIU cannot save (on /proc, which has no file handles to open again): pause, fork and
// snapshot fail with an error naming the watch, the sandbox keeps running, and once the watch
// ends the pause works.
test('a watch that cannot be saved fails pause, fork and snapshot, and the sandbox keeps running', { skip }, async () => {
  const sbx = await create();
  const before = await startCounter(sbx);
  await sbx.files.write('/tmp/procwatch.py', `
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
assert libc.inotify_add_watch(fd, b'/proc', 0x100) >= 0  # IN_CREATE
open('/tmp/watching-proc', 'w').close()
time.sleep(100000)
`);
  const watcher = await sbx.commands.run('python3 /tmp/procwatch.py', { background: true });
  await eventually(() => sbx.files.exists('/tmp/watching-proc'), 'the /proc watcher started');
  for (const [what, body] of [['pause', {}], ['fork', { count: 1 }], ['snapshots', {}]]) {
    const res = await fetch(`${daemon.baseUrl}/sandboxes/${sbx.sandboxId}/${what}`, {
      method: 'POST',
      headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    const answer = await res.text();
    assert.ok(res.status >= 400, `${what}: ${res.status} ${answer}`);
    assert.match(answer, /inotify or fanotify watch that cannot be saved/, `${what}: ${answer}`);
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running', what);
    await assertCounting(sbx, before);
  }
  await watcher.kill();
  assert.equal(await sbx.pause(), true);
  await Sandbox.connect(sbx.sandboxId);
  await assertCounting(sbx, before);
  await sbx.kill();
});

test('snapshot: new sandboxes from it; listed and deleted as E2B does', { skip }, async () => {
  const src = await create({ metadata: { t: 'snapshot' } });
  await src.files.write('/home/user/snap.txt', 'in the snapshot');
  const before = await startCounter(src);
  const snap = await src.createSnapshot({ name: 'my-snap' });
  assert.match(snap.snapshotId, /^snapshot-/);
  assert.deepEqual(snap.names, ['my-snap']);
  await src.files.write('/home/user/snap.txt', 'after the snapshot');
  const listed = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems();
  assert.deepEqual(
    listed.map((s) => s.snapshotId),
    [snap.snapshotId]
  );
  await src.kill(); // a snapshot outlives its sandbox
  const a = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
  made.push(a.sandboxId);
  assert.notEqual(a.sandboxId, src.sandboxId);
  assert.equal(await a.files.read('/home/user/snap.txt'), 'in the snapshot');
  await assertCounting(a, before);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
  await assert.rejects(Sandbox.create(snap.snapshotId));
  await a.kill();
});

// Every sandbox directory abxd's runtime holds belongs to a recorded, live sandbox.
async function assertNoOrphans() {
  const { readdirSync } = await import('node:fs');
  const live = new Set();
  for (const s of await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems())
    live.add(s.sandboxId);
  // (.rw-cache: the runtime's cache of empty writable layers, not a sandbox.)
  for (const d of readdirSync(join(daemon.home, 'sandboxes')).filter((n) => !n.startsWith('.')))
    assert.ok(live.has(d), `sandbox directory ${d} has no live record`);
}

test('kill -9 of abxd at any moment of a pause or a resume loses nothing', { skip }, async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/kept.txt', 'crash-safe');
  let seen = await startCounter(sbx);
  for (const delay of [0, 30, 60, 90, 120, 150, 200, 300]) {
    // A pause cut short at `delay` ms: afterwards the sandbox is either running or paused.
    const pausing = sbx.pause().catch(() => 'cut');
    await sleep(delay);
    await daemon.restart('SIGKILL');
    await pausing;
    let state = (await Sandbox.getInfo(sbx.sandboxId)).state;
    assert.ok(state === 'running' || state === 'paused', `after a cut pause: ${state}`);
    if (state === 'running') assert.equal(await sbx.pause(), true);
    // A resume cut short at `delay` ms.
    const resuming = Sandbox.connect(sbx.sandboxId).catch(() => 'cut');
    await sleep(delay);
    await daemon.restart('SIGKILL');
    await resuming;
    state = (await Sandbox.getInfo(sbx.sandboxId)).state;
    assert.ok(state === 'running' || state === 'paused', `after a cut resume: ${state}`);
    await Sandbox.connect(sbx.sandboxId);
    assert.equal(await sbx.files.read('/home/user/kept.txt'), 'crash-safe');
    seen = await assertCounting(sbx, seen);
    await assertNoOrphans();
  }
  await sbx.kill();
});

// The same for E2B's filesystem-only pause (no CRIU in it, but it has the same commit point):
// pause({keepMemory: false}) and the boot of connect, each cut short by a kill -9 of abxd.
test('kill -9 of abxd at any moment of a pause without memory or its boot loses nothing', { skip }, async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/kept.txt', 'crash-safe');
  for (const delay of [0, 5, 10, 20, 30, 45, 60, 100]) {
    const pausing = sbx.pause({ keepMemory: false }).catch(() => 'cut');
    await sleep(delay);
    await daemon.restart('SIGKILL');
    await pausing;
    let state = (await Sandbox.getInfo(sbx.sandboxId)).state;
    assert.ok(state === 'running' || state === 'paused', `after a cut pause: ${state}`);
    if (state === 'running') assert.equal(await sbx.pause({ keepMemory: false }), true);
    const resuming = Sandbox.connect(sbx.sandboxId).catch(() => 'cut');
    await sleep(delay);
    await daemon.restart('SIGKILL');
    await resuming;
    state = (await Sandbox.getInfo(sbx.sandboxId)).state;
    assert.ok(state === 'running' || state === 'paused', `after a cut boot: ${state}`);
    await Sandbox.connect(sbx.sandboxId);
    // A boot completed by the restart may still be starting envd: up to 10 s for it.
    let text;
    for (let tries = 0; tries < 100 && text === undefined; tries++) {
      text = await sbx.files.read('/home/user/kept.txt').catch(() => undefined);
      if (text === undefined) await sleep(100);
    }
    assert.equal(text, 'crash-safe');
    assert.equal((await sbx.commands.run('echo up')).stdout, 'up\n');
    await assertNoOrphans();
  }
  await sbx.kill();
});

test('kill -9 of abxd during a fork leaves the parent and only whole children', { skip }, async () => {
  const parent = await create();
  await parent.files.write('/home/user/origin.txt', 'parent');
  const before = await startCounter(parent);
  // Children are the sandboxes that were not there before (a sandbox an earlier failed test
  // left running is not one).
  const earlier = new Set(
    (await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems()).map((s) => s.sandboxId)
  );
  for (const delay of [50, 250, 500]) {
    const forking = parent.fork({ count: 3 }).catch(() => 'cut');
    await sleep(delay);
    await daemon.restart('SIGKILL');
    await forking;
    await assertCounting(parent, before);
    for (const s of await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems()) {
      if (earlier.has(s.sandboxId)) continue;
      made.push(s.sandboxId);
      const child = await Sandbox.connect(s.sandboxId);
      assert.equal(await child.files.read('/home/user/origin.txt'), 'parent');
      await child.kill();
    }
    await assertNoOrphans();
  }
  await parent.kill();
});

test('a full disk during a pause answers 507 and the sandbox keeps running', { skip }, async () => {
  const { execFileSync } = await import('node:child_process');
  const { mkdirSync } = await import('node:fs');
  const sbx = await create();
  const before = await startCounter(sbx);
  const dir = join(daemon.home, 'checkpoints', sbx.sandboxId);
  mkdirSync(dir, { recursive: true });
  // The sandbox's checkpoint directory is a 256 KiB filesystem: CRIU's images do not fit.
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'abx-test-full', dir]);
  try {
    const res = await fetch(`${daemon.baseUrl}/sandboxes/${sbx.sandboxId}/pause`, {
      method: 'POST',
      headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: '{}',
    });
    const body = await res.json();
    assert.equal(res.status, 507, JSON.stringify(body));
    assert.match(body.message, /no space left|keeps running/i);
  } finally {
    execFileSync('umount', ['-l', dir]);
  }
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
  await assertCounting(sbx, before);
  // And with room again, the pause works.
  assert.equal(await sbx.pause(), true);
  await Sandbox.connect(sbx.sandboxId);
  await assertCounting(sbx, before);
  await sbx.kill();
});

// The /opt/abx bundle replaced while a sandbox is paused (an upgrade of abx, a rebuild): the
// sandbox was checkpointed with the old binaries mapped, and CRIU restores only those. abxd
// keeps each bundle it bound under <home>/bundles/<version>/ (hard links) for as long as a
// sandbox or snapshot of it exists, so the resume works and the old version goes afterwards.
test('a paused sandbox resumes after the abx bundle was replaced', { skip }, async () => {
  const original = process.env.ABX_BUNDLE_DIR ?? resolve(dirname(process.env.ABXD_BIN), '../../bundle');
  const scratch = mkdtempSync(join(tmpdir(), 'abx-js-bundle-'));
  const bundle = join(scratch, 'bundle');
  // Like scripts/bundle.sh: a new directory in place of the old; here abx-envd is a new file
  // that also differs in size (CRIU refuses to map a file whose size changed).
  const install = (changed) => {
    rmSync(bundle, { recursive: true, force: true });
    execFileSync('cp', ['-al', original, bundle]);
    if (changed) {
      const envd = join(bundle, 'bin/abx-envd');
      copyFileSync(envd, `${envd}.new`);
      appendFileSync(`${envd}.new`, Buffer.alloc(4096));
      renameSync(`${envd}.new`, envd);
    }
  };
  install(false);
  const env = { ...process.env };  // startAbxd points the SDK at its own abxd: put it back after
  const own = await startAbxd('persistence-bundle', ['--pause', 'disk', '--bundle', bundle]);
  const versions = () => readdirSync(join(own.home, 'bundles')).filter((n) => !n.startsWith('.'));
  try {
    const sbx = await Sandbox.create('base', { timeoutMs: 600_000 });
    own.made.push(sbx.sandboxId);
    const before = await startCounter(sbx);
    assert.equal(await sbx.pause(), true);
    install(true);
    await own.restart('SIGTERM');
    // The paused sandbox's version is kept beside the new one.
    assert.equal(versions().length, 2, versions().join(' '));
    await Sandbox.connect(sbx.sandboxId);
    await assertCounting(sbx, before);
    // A command started now runs the binaries the sandbox was created with, as a command
    // started before the pause would have.
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n');
    // New sandboxes get the new bundle.
    const fresh = await Sandbox.create('base', { timeoutMs: 60_000 });
    own.made.push(fresh.sandboxId);
    const size = await fresh.commands.run('stat -c %s /opt/abx/bin/abx-envd');
    const oldSize = await sbx.commands.run('stat -c %s /opt/abx/bin/abx-envd');
    assert.equal(Number(size.stdout) - Number(oldSize.stdout), 4096);
    await sbx.kill();
    await fresh.kill();
    // Nothing uses the old version any more: the next start removes it.
    await own.restart('SIGTERM');
    assert.equal(versions().length, 1, versions().join(' '));
  } finally {
    await own.stop();
    rmSync(scratch, { recursive: true, force: true });
    for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) process.env[k] = env[k];
  }
});
