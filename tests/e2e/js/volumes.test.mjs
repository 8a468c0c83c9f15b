// Volumes (issue 39, item 4), driven by the official E2B JS SDK against a real abxd: Volume's
// create/list/getInfo/connect/destroy on /volumes, a sandbox created with volumeMounts writing a
// file that a second sandbox reads after the first was killed, the volume kept across an abxd
// restart and a pause to disk (CRIU: the mount is an external bind of the checkpoint), a fork and
// a snapshot's sandbox sharing it, bad inputs answered with E2B's errors, and the volume content
// API (Volume's file methods with E2B_VOLUME_API_URL at abxd), confined to the volume's directory,
// and the quota (--volume-size-mib: each volume an ext4 image, ENOSPC past it, its loop device
// kept across abxd restarts and released at delete).
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test volumes.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b';

import { startAbxd } from './abxd.mjs';

let daemon;
let made;

const criu = process.env.ABX_CRIU ?? '/usr/local/lib/abx/criu/criu';
const noCriu = existsSync(criu) ? false : `CRIU is not installed at ${criu} (scripts/install-criu.sh)`;

before(async () => {
  // A small quota, so that filling a volume is quick.
  daemon = await startAbxd('volumes', ['--volume-size-mib', '32', ...(noCriu ? [] : ['--pause', 'disk'])]);
  ({ made } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
});

async function create(opts = {}) {
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000, ...opts });
  made.push(sbx.sandboxId);
  return sbx;
}

test('a volume outlives the sandbox that wrote it, and abxd restarts', async () => {
  const vol = await Volume.create('shared-data');
  assert.match(vol.volumeId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(vol.name, 'shared-data');
  assert.ok(vol.token.length > 0);

  const first = await create({ volumeMounts: { '/mnt/data': vol } });
  // The default user writes there (the volume's root is the sandbox's `user`'s).
  await first.files.write('/mnt/data/hello.txt', 'written by the first sandbox');
  const who = await first.commands.run('stat -c %u:%g /mnt/data && id -u');
  assert.equal(who.stdout.trim(), '1000:1000\n1000');
  // Root of the sandbox writes there too; the mount is not the writable layer.
  await first.commands.run('echo root > /mnt/data/root.txt', { user: 'root' });
  const info = await Sandbox.getInfo(first.sandboxId);
  assert.deepEqual(info.volumeMounts, [{ name: 'shared-data', path: '/mnt/data' }]);
  await first.kill();

  // By name, at another path.
  const second = await create({ volumeMounts: { '/home/user/work': 'shared-data' } });
  assert.equal(await second.files.read('/home/user/work/hello.txt'), 'written by the first sandbox');
  assert.equal((await second.files.read('/home/user/work/root.txt')).trim(), 'root');
  await second.kill();

  await daemon.restart();
  const listed = await Volume.list();
  assert.deepEqual(listed, [{ volumeId: vol.volumeId, name: 'shared-data' }]);
  const again = await Volume.connect(vol.volumeId);
  assert.equal(again.name, 'shared-data');
  assert.equal(again.token, vol.token);
  const third = await create({ volumeMounts: { '/data': 'shared-data' } });
  assert.equal(await third.files.read('/data/hello.txt'), 'written by the first sandbox');

  // In use: refused (409), the data kept; once the sandbox is gone, deleted with its files.
  await assert.rejects(Volume.destroy(vol.volumeId), (e) => {
    assert.ok(e instanceof VolumeError, String(e));
    assert.match(e.message, /is mounted by sandbox\(es\) /);
    return true;
  });
  await third.kill();
  assert.equal(await Volume.destroy(vol.volumeId), true);
  assert.equal(await Volume.destroy(vol.volumeId), false);  // 404 now
  await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError);
  assert.deepEqual(await Volume.list(), []);
  // A new volume of the same name starts empty.
  const fresh = await Volume.create('shared-data');
  const fourth = await create({ volumeMounts: { '/data': fresh } });
  assert.equal((await fourth.commands.run('ls -A /data')).stdout, '');
  await fourth.kill();
  await Volume.destroy(fresh.volumeId);
});

// The loop devices attached to `image`, by what /sys says they are backed by (a deleted image's
// name gets " (deleted)" appended there).
function loopsOf(image) {
  return readdirSync('/sys/block').filter((d) => d.startsWith('loop')).filter((d) => {
    try {
      return readFileSync(`/sys/block/${d}/loop/backing_file`, 'utf8').trim().startsWith(image);
    } catch {
      return false;  // not bound
    }
  });
}

test('a volume has a quota: ENOSPC past it, usable after, kept across restarts, its loop device released at delete', async () => {
  const vol = await Volume.create('quota-data');
  const image = join(daemon.home, 'volumes', `${vol.volumeId}.img`);
  assert.ok(existsSync(image), image);
  assert.equal(execFileSync('losetup', ['-j', image], { encoding: 'utf8' }).trim().split('\n').length, 1);

  const a = await create({ volumeMounts: { '/mnt/q': vol } });
  // A new volume is empty (mkfs's lost+found is gone) and its root is the sandbox's `user`'s.
  assert.equal((await a.commands.run('ls -A /mnt/q; stat -c %u:%g:%a /mnt/q')).stdout, '1000:1000:755\n');
  const df = await a.commands.run('df -k --output=size /mnt/q | tail -1');
  assert.ok(Number(df.stdout.trim()) <= 32 * 1024, df.stdout);
  // 40 MiB into a 32 MiB volume: No space left on device, as `user`.
  await assert.rejects(a.commands.run('dd if=/dev/zero of=/mnt/q/big bs=1M count=40'), (e) => {
    assert.match(e.stderr ?? e.message, /No space left on device/);
    return true;
  });
  // Still usable: once the big file is gone, a smaller write works.
  await a.commands.run('rm /mnt/q/big && dd if=/dev/zero of=/mnt/q/small bs=1M count=8 && echo kept > /mnt/q/note');
  assert.equal((await a.commands.run('stat -c %s /mnt/q/small')).stdout, `${8 << 20}\n`);

  // The content API's writes count too: 40 MiB is a 507, and the volume stays as it was.
  const put = await fetch(`${daemon.baseUrl}/volumecontent/${vol.volumeId}/file?path=/api-big`, {
    method: 'PUT', headers: { Authorization: `Bearer ${vol.token}` }, body: Buffer.alloc(40 << 20, 1),
  });
  assert.equal(put.status, 507, await put.text());
  assert.equal((await a.commands.run('ls -A /mnt/q')).stdout, 'note\nsmall\n');

  // abxd stopped while `a` runs: `a` keeps its bind; the next abxd mounts the same loop device
  // again (one device, one filesystem), so what `a` writes now a new sandbox reads.
  await daemon.restart();
  assert.equal(loopsOf(image).length, 1);
  const back = await Sandbox.connect(a.sandboxId);
  await back.commands.run('echo after-restart > /mnt/q/after');
  const b = await create({ volumeMounts: { '/v': 'quota-data' } });
  assert.equal((await b.files.read('/v/after')).trim(), 'after-restart');
  await assert.rejects(b.commands.run('dd if=/dev/zero of=/v/big bs=1M count=40'), (e) => {
    assert.match(e.stderr ?? e.message, /No space left on device/);
    return true;
  });
  await b.commands.run('rm -f /v/big');
  await b.kill();
  await back.kill();

  // Killed (SIGKILL) with the volume mounted, and started again: mounted once, the data there.
  await daemon.restart('SIGKILL');
  assert.equal(loopsOf(image).length, 1);
  const c = await create({ volumeMounts: { '/v': vol } });
  assert.equal((await c.files.read('/v/note')).trim(), 'kept');
  assert.equal((await c.commands.run('stat -c %s /v/small')).stdout, `${8 << 20}\n`);
  await c.kill();

  // Deleted: the image is gone, and no loop device is left attached to it.
  assert.equal(await Volume.destroy(vol.volumeId), true);
  assert.equal(existsSync(image), false);
  assert.deepEqual(loopsOf(image), []);
  assert.equal(existsSync(join(daemon.home, 'volumes', vol.volumeId)), false);
});

test('pause and resume keep the mount, and a fork shares the volume', { skip: noCriu }, async () => {
  const vol = await Volume.create('paused-data');
  const sbx = await create({ volumeMounts: { '/mnt/v': vol } });
  await sbx.files.write('/mnt/v/before.txt', 'before the pause');
  await sbx.pause();
  await daemon.restart();
  const back = await Sandbox.connect(sbx.sandboxId);
  assert.equal(await back.files.read('/mnt/v/before.txt'), 'before the pause');
  await back.files.write('/mnt/v/after.txt', 'after the resume');

  // E2B's volumes are shared network volumes: a fork mounts the same one, not a copy.
  const [child] = await back.fork({ count: 1 });
  assert.ok(child instanceof Sandbox, `the fork failed: ${child}`);
  made.push(child.sandboxId);
  assert.equal(await child.files.read('/mnt/v/after.txt'), 'after the resume');
  await child.files.write('/mnt/v/from-fork.txt', 'the fork wrote this');
  assert.equal(await back.files.read('/mnt/v/from-fork.txt'), 'the fork wrote this');
  assert.deepEqual((await Sandbox.getInfo(child.sandboxId)).volumeMounts,
    [{ name: 'paused-data', path: '/mnt/v' }]);
  await assert.rejects(Volume.destroy(vol.volumeId), /is mounted by sandbox\(es\) /);
  await child.kill();
  // A sandbox made from a snapshot mounts the snapshot's volumes (shared), and only those.
  const snap = await back.createSnapshot();
  await assert.rejects(
    Sandbox.create(snap.snapshotId, { timeoutMs: 600_000, volumeMounts: { '/other': vol } }),
    /mounts the snapshot's volumes and no others/);
  const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
  made.push(fromSnap.sandboxId);
  await fromSnap.files.write('/mnt/v/from-snapshot.txt', 'the snapshot child wrote this');
  assert.equal(await back.files.read('/mnt/v/from-snapshot.txt'), 'the snapshot child wrote this');
  await fromSnap.kill();
  await Sandbox.deleteSnapshot(snap.snapshotId);
  await back.kill();
  const other = await create({ volumeMounts: { '/v': 'paused-data' } });
  assert.equal(await other.files.read('/v/after.txt'), 'after the resume');
  await other.kill();
  await Volume.destroy(vol.volumeId);
});

test('bad volume names, ids and mounts are refused with E2B errors', async () => {
  const api = (path, init = {}) => fetch(`${daemon.baseUrl}${path}`, {
    ...init,
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
  });
  for (const name of ['', 'has space', 'dot.name', 'slash/name', 'x'.repeat(129)]) {
    const res = await api('/volumes', { method: 'POST', body: JSON.stringify({ name }) });
    assert.equal(res.status, 400, name);
    assert.deepEqual(await res.json(), { code: 400, message: 'Invalid volume name' });
  }
  const missing = await api('/volumes', { method: 'POST', body: '{}' });
  assert.equal(missing.status, 400);
  const vol = await Volume.create('Ok_name-1');
  await assert.rejects(Volume.create('Ok_name-1'), (e) => {
    assert.ok(e instanceof VolumeError);
    assert.match(e.message, /Volume with name 'Ok_name-1' already exists/);
    return true;
  });
  const bad = await api('/volumes/not%20an%20id');
  assert.equal(bad.status, 400);
  assert.deepEqual(await bad.json(), { code: 400, message: 'Invalid volume ID' });
  const unknown = await api('/volumes/00000000-0000-4000-8000-000000000000');
  assert.equal(unknown.status, 404);
  assert.deepEqual(await unknown.json(), { code: 404, message: 'Volume not found' });
  // Without a key: 401, as every control route.
  const anon = await fetch(`${daemon.baseUrl}/volumes`);
  assert.equal(anon.status, 401);

  const refused = async (mounts, pattern) => {
    await assert.rejects(Sandbox.create('base', { volumeMounts: mounts }), (e) => {
      assert.match(e.message, /^400: /);
      assert.match(e.message, pattern);
      return true;
    });
  };
  await refused({ '/data': 'no-such-volume' }, /volume 'no-such-volume' not found/);
  await refused({ 'relative/path': vol }, /must be absolute/);
  await refused({ '/mnt/../etc': vol }, /must not have \. or \.\. components/);
  await refused({ '/': vol }, /must not be \//);
  await refused({ '/proc/x': vol }, /\/proc, which abxd mounts itself/);
  await refused({ '/opt': vol }, /\/opt\/abx, which abxd mounts itself/);
  await refused({ '/dev': vol }, /\/dev, which abxd mounts itself/);
  await refused({ '/a': vol, '/a/b': vol }, /another mount of the sandbox/);
  // A mount without its path (the SDK always sends one).
  const res = await api('/sandboxes', {
    method: 'POST',
    body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: 'Ok_name-1' }] }),
  });
  assert.equal(res.status, 400);
  assert.match((await res.json()).message, /volumeMounts\[0\]\.path/);
  await Volume.destroy(vol.volumeId);
});

test('the Volume file API: write, read, list, makeDir, getInfo, exists, updateMetadata, remove, confined to the volume', async () => {
  process.env.E2B_VOLUME_API_URL = daemon.baseUrl;
  try {
    const vol = await Volume.create('content-api');
    const w = await vol.writeFile('/docs/a.txt', 'hello volume');  // its parent is made too
    assert.equal(w.type, 'file');
    assert.equal(w.path, '/docs/a.txt');
    assert.equal(w.size, 12);
    assert.equal(w.uid, 1000); // the sandboxes' `user`, as the volume's root
    assert.equal(w.mode, 0o644);
    assert.ok(w.mtime instanceof Date && !Number.isNaN(w.mtime.getTime()));
    assert.equal(await vol.readFile('/docs/a.txt'), 'hello volume');
    await vol.writeFile('/docs/a.txt', 'replaced');
    assert.equal(await vol.readFile('docs/a.txt'), 'replaced');
    const bytes = await vol.readFile('/docs/a.txt', { format: 'bytes' });
    assert.equal(Buffer.from(bytes).toString(), 'replaced');

    const d = await vol.makeDir('/x/y', { force: true });
    assert.equal(d.type, 'directory');
    assert.equal(d.path, '/x/y');
    await assert.rejects(vol.makeDir('/x'), (e) => e instanceof VolumeError && /exists/.test(e.message));
    await assert.rejects(vol.makeDir('/no/parent'), VolumePathNotFoundError);
    assert.deepEqual((await vol.list('/')).map((e) => `${e.type}:${e.path}`), ['directory:/docs', 'directory:/x']);
    assert.deepEqual((await vol.list('/', { depth: 2 })).map((e) => e.path), ['/docs', '/docs/a.txt', '/x', '/x/y']);
    await assert.rejects(vol.list('/nope'), VolumePathNotFoundError);

    const info = await vol.getInfo('/docs/a.txt');
    assert.equal(info.name, 'a.txt');
    assert.equal(info.size, 8);
    assert.equal(await vol.exists('/docs/a.txt'), true);
    assert.equal(await vol.exists('/nope'), false);
    const changed = await vol.updateMetadata('/docs/a.txt', { mode: 0o600 });
    assert.equal(changed.mode, 0o600);

    // A sandbox that mounts the volume sees the API's files, and what it writes the API reads,
    // but its symlinks out of the volume lead nowhere from the API's side.
    const sbx = await create({ volumeMounts: { '/mnt/v': vol } });
    assert.equal(await sbx.files.read('/mnt/v/docs/a.txt'), 'replaced');
    assert.equal((await sbx.commands.run('stat -c %a:%u /mnt/v/docs/a.txt')).stdout, '600:1000\n');
    await sbx.commands.run('echo from-sandbox > /mnt/v/s.txt && ln -s /etc /mnt/v/etc-link && ln -s ../../../../../../etc/passwd /mnt/v/pw');
    assert.equal(await vol.readFile('/s.txt'), 'from-sandbox\n');
    await assert.rejects(vol.readFile('/etc-link/passwd'), VolumePathNotFoundError);
    await assert.rejects(vol.readFile('/pw'), VolumePathNotFoundError);
    await assert.rejects(vol.writeFile('/etc-link/planted', 'x'), VolumeError);
    assert.equal((await vol.getInfo('/etc-link')).type, 'symlink');
    await assert.rejects(vol.readFile('/../etc/passwd'), (e) => e instanceof VolumeError && /\.\. components/.test(e.message));
    await vol.remove('/etc-link');
    assert.equal((await sbx.commands.run('test -e /etc/passwd && echo kept')).stdout, 'kept\n');

    await vol.remove('/x');
    assert.equal(await vol.exists('/x'), false);
    await assert.rejects(vol.remove('/x'), VolumePathNotFoundError);
    await sbx.kill();

    // The volume's token is the credential: another one, or none, is a 401.
    for (const auth of [{}, { Authorization: 'Bearer wrong' }, { 'X-API-Key': process.env.E2B_API_KEY }]) {
      const res = await fetch(`${daemon.baseUrl}/volumecontent/${vol.volumeId}/path?path=/`, { headers: auth });
      assert.equal(res.status, 401, JSON.stringify(auth));
    }
    const put = await fetch(`${daemon.baseUrl}/volumecontent/${vol.volumeId}/file?path=/z`, { method: 'PUT', headers: { Authorization: 'Bearer wrong' }, body: 'z' });
    assert.equal(put.status, 401);
    assert.equal(await vol.exists('/z'), false);
    await Volume.destroy(vol.volumeId);
  } finally {
    delete process.env.E2B_VOLUME_API_URL;
  }
});
