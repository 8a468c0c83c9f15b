// The official E2B JS SDK (npm `e2b`, 2.x) against a real abxd with real sandboxes.
//
// Starts abxd itself (binary from $ABXD_BIN, set by ctest) with a temporary home on
// 127.0.0.1:0, points E2B_API_URL and E2B_SANDBOX_URL at that one listener (abxd routes envd
// traffic by the SDK's E2b-Sandbox-Id / E2b-Sandbox-Port headers), and stops it with SIGTERM.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import {
  CommandExitError,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  NotFoundError,
  Sandbox,
  SandboxNotFoundError,
} from 'e2b';

const ABXD_BIN = process.env.ABXD_BIN;

let abxd;
let home;
let base; // port of abxd's listener as http://127.0.0.1:<port>
let apiKey;

function startAbxd() {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  home = mkdtempSync(join(tmpdir(), 'abx-js-e2e-'));
  abxd = spawn(ABXD_BIN, ['--home', home, '--listen', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('abxd did not print its address')), 20000);
    abxd.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`abxd exited early: code ${code} signal ${sig}`));
    });
    const lines = createInterface({ input: abxd.stdout });
    lines.on('line', (line) => {
      const m = /^listening on (\S+):(\d+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(`http://127.0.0.1:${m[2]}`);
      }
    });
  });
}

function stopAbxd() {
  if (!abxd || abxd.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    abxd.removeAllListeners('exit');
    abxd.once('exit', resolve);
    abxd.kill('SIGTERM');
  });
}

before(async () => {
  base = await startAbxd();
  apiKey = readFileSync(join(home, 'api_key'), 'utf8').trim();
  process.env.E2B_API_URL = base;
  process.env.E2B_SANDBOX_URL = base;
  process.env.E2B_API_KEY = apiKey;
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  await stopAbxd();
  if (home) rmSync(home, { recursive: true, force: true });
});

describe('base sandbox', () => {
  let sbx;

  before(async () => {
    sbx = await Sandbox.create('base', { metadata: { suite: 'js-e2e' } });
  });

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId);
  });

  test('create returns an E2B-shaped sandbox id', () => {
    assert.match(sbx.sandboxId, /^[a-z0-9]{20}$/);
  });

  test('commands.run: stdout and exit code 0', async () => {
    const r = await sbx.commands.run('echo hi');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.stderr, '');
  });

  test('commands.run: non-zero exit rejects with CommandExitError carrying stderr', async () => {
    await assert.rejects(sbx.commands.run('echo out; echo oops >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`);
      assert.equal(e.exitCode, 3);
      assert.equal(e.stdout, 'out\n');
      assert.equal(e.stderr, 'oops\n');
      return true;
    });
  });

  test('commands.run: stderr on success, streamed callbacks', async () => {
    const out = [];
    const err = [];
    const r = await sbx.commands.run('echo a; echo b >&2', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    });
    assert.equal(r.stdout, 'a\n');
    assert.equal(r.stderr, 'b\n');
    assert.equal(out.join(''), 'a\n');
    assert.equal(err.join(''), 'b\n');
  });

  test('commands.run: envs and cwd', async () => {
    const r = await sbx.commands.run('echo "$FOO-$BAR"; pwd', {
      envs: { FOO: 'foo', BAR: 'with space' },
      cwd: '/tmp',
    });
    assert.equal(r.stdout, 'foo-with space\n/tmp\n');
  });

  test('commands.run: a missing cwd is an error, not a hang', async () => {
    await assert.rejects(sbx.commands.run('pwd', { cwd: '/no/such/dir' }));
  });

  test('commands.run: background + list + kill', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true });
    assert.ok(h.pid > 0);
    const procs = await sbx.commands.list();
    assert.ok(
      procs.some((p) => p.pid === h.pid),
      `pid ${h.pid} missing from ${JSON.stringify(procs)}`
    );
    assert.equal(await h.kill(), true);
    await assert.rejects(h.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, `got ${e}`);
      assert.notEqual(e.exitCode, 0);
      return true;
    });
    // Gone now: killing again reports false.
    assert.equal(await sbx.commands.kill(h.pid), false);
  });

  test('commands: stdin via sendStdin', async () => {
    const h = await sbx.commands.run('head -n 1', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'hello stdin\n');
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hello stdin\n');
  });

  test('commands: connect to a running process', async () => {
    const h = await sbx.commands.run('head -n 1', { background: true, stdin: true });
    const again = await sbx.commands.connect(h.pid);
    await h.sendStdin('via connect\n');
    const r = await again.wait();
    assert.equal(r.stdout, 'via connect\n');
  });

  test('files: write, read, list, exists, getInfo', async () => {
    const info = await sbx.files.write('/tmp/js-e2e/dir/a.txt', 'hello file');
    assert.equal(info.path, '/tmp/js-e2e/dir/a.txt');
    assert.equal(info.name, 'a.txt');
    assert.equal(await sbx.files.read('/tmp/js-e2e/dir/a.txt'), 'hello file');
    // Overwrite; and bytes survive as bytes.
    await sbx.files.write('/tmp/js-e2e/dir/a.txt', 'v2');
    assert.equal(await sbx.files.read('/tmp/js-e2e/dir/a.txt'), 'v2');
    const bin = new Uint8Array([0, 1, 2, 255, 254]);
    await sbx.files.write('/tmp/js-e2e/bin', bin.buffer);
    assert.deepEqual(await sbx.files.read('/tmp/js-e2e/bin', { format: 'bytes' }), bin);
    await sbx.files.write('/tmp/js-e2e/empty', '');
    assert.equal(await sbx.files.read('/tmp/js-e2e/empty'), '');

    const entries = await sbx.files.list('/tmp/js-e2e');
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]));
    assert.deepEqual(Object.keys(byName).sort(), ['bin', 'dir', 'empty']);
    assert.equal(byName.dir.type, FileType.DIR);
    assert.equal(byName.bin.type, FileType.FILE);
    assert.equal(byName.bin.size, 5);
    assert.equal(byName.bin.path, '/tmp/js-e2e/bin');
    assert.ok(byName.bin.modifiedTime instanceof Date);

    assert.equal(await sbx.files.exists('/tmp/js-e2e/dir/a.txt'), true);
    assert.equal(await sbx.files.exists('/tmp/js-e2e/nope'), false);
    const st = await sbx.files.getInfo('/tmp/js-e2e/dir/a.txt');
    assert.equal(st.type, FileType.FILE);
    assert.equal(st.size, 2);

    // The file written through the SDK is what a process in the sandbox sees.
    const r = await sbx.commands.run('cat /tmp/js-e2e/dir/a.txt');
    assert.equal(r.stdout, 'v2');
  });

  test('files: read of a missing file is FileNotFoundError', async () => {
    await assert.rejects(sbx.files.read('/tmp/js-e2e/missing'), (e) => {
      assert.ok(e instanceof FileNotFoundError || e instanceof NotFoundError, `got ${e}`);
      return true;
    });
    await assert.rejects(sbx.files.list('/tmp/js-e2e/missing'), (e) => {
      assert.ok(e instanceof NotFoundError, `got ${e}`);
      return true;
    });
  });

  test('files: makeDir, rename, remove', async () => {
    assert.equal(await sbx.files.makeDir('/tmp/js-e2e2/sub/deeper'), true);
    assert.equal(await sbx.files.makeDir('/tmp/js-e2e2/sub/deeper'), false);
    await sbx.files.write('/tmp/js-e2e2/sub/f', 'moved');
    const moved = await sbx.files.rename('/tmp/js-e2e2/sub/f', '/tmp/js-e2e2/g');
    assert.equal(moved.path, '/tmp/js-e2e2/g');
    assert.equal(moved.name, 'g');
    assert.equal(await sbx.files.exists('/tmp/js-e2e2/sub/f'), false);
    assert.equal(await sbx.files.read('/tmp/js-e2e2/g'), 'moved');
    await sbx.files.remove('/tmp/js-e2e2/g');
    assert.equal(await sbx.files.exists('/tmp/js-e2e2/g'), false);
    await sbx.files.remove('/tmp/js-e2e2/sub'); // a non-empty directory
    assert.equal(await sbx.files.exists('/tmp/js-e2e2/sub'), false);
  });

  test('files: watchDir reports a write by its name', async () => {
    await sbx.files.makeDir('/tmp/js-e2e-watch');
    const events = [];
    let resolveWrite;
    const wrote = new Promise((r) => (resolveWrite = r));
    const handle = await sbx.files.watchDir('/tmp/js-e2e-watch', (e) => {
      events.push(`${e.type} ${e.name}`);
      if (e.type === FilesystemEventType.WRITE && e.name === 'w.txt') resolveWrite();
    });
    let timer;
    try {
      await sbx.files.write('/tmp/js-e2e-watch/w.txt', 'watched');
      const guard = new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no write event; saw ${JSON.stringify(events)}`)),
          10000
        );
      });
      await Promise.race([wrote, guard]);
    } finally {
      clearTimeout(timer);
      await handle.stop();
    }
    // envd's temporary upload files are not shown to watchers.
    assert.deepEqual(
      events.filter((e) => !e.endsWith(' w.txt')),
      [],
      JSON.stringify(events)
    );
  });

  // envd 0.5.2: closeStdin ends the process's stdin (EOF), so `cat` finishes.
  test('commands: closeStdin gives the process EOF', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'until eof');
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'until eof');
  });

  // envd 0.5.7: gzip uploads (octet-stream, Content-Encoding: gzip) and downloads
  // (Accept-Encoding: gzip; fetch decodes the body).
  test('files: gzip write and read', async () => {
    const text = 'gzip line\n'.repeat(5000);
    const info = await sbx.files.write('/tmp/js-e2e-gz/a.txt', text, { gzip: true });
    assert.equal(info.path, '/tmp/js-e2e-gz/a.txt');
    assert.equal(await sbx.files.read('/tmp/js-e2e-gz/a.txt', { gzip: true }), text);
    assert.equal(await sbx.files.read('/tmp/js-e2e-gz/a.txt'), text);
    const r = await sbx.commands.run('wc -c < /tmp/js-e2e-gz/a.txt');
    assert.equal(r.stdout.trim(), String(text.length));
    const bin = new Uint8Array([0, 1, 2, 255, 254]);
    await sbx.files.write('/tmp/js-e2e-gz/bin', bin.buffer, { gzip: true });
    assert.deepEqual(await sbx.files.read('/tmp/js-e2e-gz/bin', { format: 'bytes', gzip: true }), bin);
  });

  // envd 0.6.2: metadata travels as X-Metadata-* headers, is kept as user.e2b.* xattrs, and comes
  // back from write, getInfo and list.
  test('files: metadata round trip', async () => {
    const md = { author: 'alice', purpose: 'js e2e' };
    const info = await sbx.files.write('/tmp/js-e2e-md/a.txt', 'with metadata', { metadata: md });
    assert.deepEqual(info.metadata, md);
    assert.deepEqual((await sbx.files.getInfo('/tmp/js-e2e-md/a.txt')).metadata, md);
    await sbx.files.write('/tmp/js-e2e-md/b.txt', 'streamed', {
      metadata: { k: 'v' },
      useOctetStream: true,
    });
    await sbx.files.write('/tmp/js-e2e-md/plain.txt', 'none');
    const byName = Object.fromEntries(
      (await sbx.files.list('/tmp/js-e2e-md')).map((e) => [e.name, e])
    );
    assert.deepEqual(byName['a.txt'].metadata, md);
    assert.deepEqual(byName['b.txt'].metadata, { k: 'v' });
    assert.equal(byName['plain.txt'].metadata, undefined);
  });

  // envd 0.6.3 / 0.6.4: events carry the entry with includeEntry; allowNetworkMounts is accepted.
  test('files: watchDir with includeEntry and allowNetworkMounts', async () => {
    await sbx.files.makeDir('/tmp/js-e2e-watch2');
    let resolveEntry;
    const got = new Promise((r) => (resolveEntry = r));
    const handle = await sbx.files.watchDir(
      '/tmp/js-e2e-watch2',
      (e) => {
        if (e.name === 'e.txt' && e.entry) resolveEntry(e);
      },
      { includeEntry: true, allowNetworkMounts: true }
    );
    let timer;
    try {
      await sbx.files.write('/tmp/js-e2e-watch2/e.txt', 'entry', { metadata: { tag: 'w' } });
      const guard = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('no event with an entry')), 10000);
      });
      const e = await Promise.race([got, guard]);
      assert.equal(e.entry.name, 'e.txt');
      assert.equal(e.entry.path, '/tmp/js-e2e-watch2/e.txt');
      assert.equal(e.entry.type, FileType.FILE);
    } finally {
      clearTimeout(timer);
      await handle.stop();
    }
  });

  // Signed file URLs carry no X-Access-Token: abxd's proxy lets a /files request with a
  // `signature` through and envd checks it (and its expiration). With E2B_SANDBOX_URL pointing at
  // abxd's one listener the URL has no sandbox host, so the routing headers name the sandbox.
  test('files: signed download and upload URLs', async () => {
    const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' };
    await sbx.files.write('/tmp/js-e2e-signed/d.txt', 'signed download');
    const down = await sbx.downloadUrl('/tmp/js-e2e-signed/d.txt');
    assert.match(down, /signature=v1_/);
    let res = await fetch(down, { headers: route });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'signed download');
    const expiring = await sbx.downloadUrl('/tmp/js-e2e-signed/d.txt', { useSignatureExpiration: 60 });
    res = await fetch(expiring, { headers: route });
    assert.equal(await res.text(), 'signed download');
    // Tampered or missing signature: 401 (envd's, then the proxy's).
    res = await fetch(down.replace('signature=v1_', 'signature=v1_x'), { headers: route });
    assert.equal(res.status, 401);
    res = await fetch(down.replace(/&?signature=[^&]*/, ''), { headers: route });
    assert.equal(res.status, 401);
    // Upload: a multipart form to the signed URL.
    const up = await sbx.uploadUrl('/tmp/js-e2e-signed/u.txt');
    const form = new FormData();
    form.append('file', new Blob(['signed upload']), 'u.txt');
    res = await fetch(up, { method: 'POST', body: form, headers: route });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(await sbx.files.read('/tmp/js-e2e-signed/u.txt'), 'signed upload');
    // An upload signature does not allow a read (the operation is signed too).
    res = await fetch(up, { headers: route });
    assert.equal(res.status, 401);
  });

  test('Sandbox.list().nextItems() shows the sandbox', async () => {
    const paginator = Sandbox.list();
    const items = await paginator.nextItems();
    const mine = items.find((i) => i.sandboxId === sbx.sandboxId);
    assert.ok(mine, `${sbx.sandboxId} missing from ${JSON.stringify(items)}`);
    assert.equal(mine.templateId, 'base');
    assert.equal(mine.state, 'running');
    assert.deepEqual(mine.metadata, { suite: 'js-e2e' });
    assert.equal(paginator.hasNext, false);

    const filtered = await Sandbox.list({ query: { metadata: { suite: 'nope' } } }).nextItems();
    assert.equal(filtered.length, 0);
  });

  test('getInfo and setTimeout', async () => {
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'base');
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { suite: 'js-e2e' });
    assert.ok(info.startedAt instanceof Date && !Number.isNaN(info.startedAt.getTime()));
    assert.ok(info.endAt instanceof Date && info.endAt >= info.startedAt);

    await sbx.setTimeout(600_000);
    const later = await sbx.getInfo();
    assert.ok(later.endAt > info.endAt, `${later.endAt} should be after ${info.endAt}`);
    assert.equal(await sbx.isRunning(), true);
  });

  test('Sandbox.connect gives a working handle', async () => {
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal(again.sandboxId, sbx.sandboxId);
    const r = await again.commands.run('cat /tmp/js-e2e/dir/a.txt');
    assert.equal(r.stdout, 'v2');
  });

  test('unknown sandboxes are SandboxNotFoundError', async () => {
    const id = 'a'.repeat(20);
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo(id), SandboxNotFoundError);
    await assert.rejects(Sandbox.setTimeout(id, 10_000), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(id), false);
  });
});

describe('demo sandbox', () => {
  let sbx;

  before(async () => {
    sbx = await Sandbox.create('demo');
  });

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId);
  });

  const serverHeaders = (token) => ({
    'E2b-Sandbox-Id': sbx.sandboxId,
    'E2b-Sandbox-Port': '49982',
    'X-Access-Token': token,
  });

  test('the command server answers through the proxy', async () => {
    const token = sbx.envdAccessToken;
    assert.equal(typeof token, 'string');
    assert.ok(token.length > 0);

    // The command server starts right after envd (which is what create waits for): until it
    // listens the proxy answers 502. Wait for it, bounded.
    let list;
    for (let i = 0; i < 200; i++) {
      list = await fetch(`${base}/commands`, { headers: serverHeaders(token) });
      if (list.status !== 502) break;
      await list.body?.cancel();
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.equal(list.status, 200);
    const names = (await list.json()).commands.map((c) => c.name);
    assert.ok(names.includes('demo'), JSON.stringify(names));

    const res = await fetch(`${base}/commands/demo`, {
      method: 'POST',
      headers: { ...serverHeaders(token), 'Content-Type': 'application/json' },
      body: JSON.stringify({ x: 42, y: 'world' }),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { result: '42: world' });
  });

  test('the command server refuses a wrong token', async () => {
    const res = await fetch(`${base}/commands/demo`, {
      method: 'POST',
      headers: { ...serverHeaders('not-the-token'), 'Content-Type': 'application/json' },
      body: JSON.stringify({ x: 1 }),
    });
    assert.equal(res.status, 401);
    await res.body?.cancel();
  });

  test('envd works in the demo template too', async () => {
    const r = await sbx.commands.run('echo demo');
    assert.equal(r.stdout, 'demo\n');
  });

  test('kill: true, then false', async () => {
    assert.equal(await sbx.kill(), true);
    assert.equal(await sbx.kill(), false);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
    await assert.rejects(sbx.getInfo(), SandboxNotFoundError);
    sbx = undefined;
  });
});
