// The official E2B CLI (npm @e2b/cli 2.19, issue 39) against a real abxd, configured as its docs
// configure it without a login: E2B_API_KEY, with the SDK's E2B_API_URL / E2B_SANDBOX_URL pointing
// at abxd (abxd.mjs sets them). Each command runs as a user would run it (`e2b ...` from
// node_modules/.bin, no TTY): sandbox create --detach, list (state and metadata filters, json),
// info, exec (exit code and output), logs, metrics, pause, resume, kill (by id and --all),
// template list and template create (a Dockerfile built through the SDK's Template builder, then
// a sandbox of it); and the CLI's own errors for an unknown sandbox and a missing key.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test cli.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { NotFoundError, Sandbox } from 'e2b';

import { privateImageStore, startAbxd } from './abxd.mjs';

const e2bBin = join(dirname(fileURLToPath(import.meta.url)), 'node_modules', '.bin', 'e2b');

let daemon;
let made;
let home;
let images;

before(async () => {
  // `template create` builds: into an image store of this test's own (the shared one's `base`,
  // hard-linked), never into the shared store.
  images = mkdtempSync(join(tmpdir(), 'abx-js-cli-images-'));
  daemon = await startAbxd('cli', ['--image-store', privateImageStore(images).store]);
  ({ made, home } = daemon);
});

after(async () => {
  if (daemon) await daemon.stop();
  if (images) rmSync(images, { recursive: true, force: true });
});

// Runs `e2b args...` with the test's environment (plus `env`); resolves with {code, out, err}.
// HOME is the test's abxd home, so no ~/.e2b/config.json of the machine's user is read.
function e2b(args, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(e2bBin, args, {
      env: { ...process.env, HOME: home, NO_UPDATE_NOTIFIER: '1', NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

function ok(r, what) {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\nstdout: ${r.out}\nstderr: ${r.err}`);
  return r.out;
}

// The CLI's json list prints one JSON array (after a blank line).
const ids = (out) => JSON.parse(out.trim()).map((s) => s.sandboxId);

test('e2b sandbox create --detach, list, info, exec, logs, metrics', async () => {
  const id = ok(await e2b(['sandbox', 'create', 'base', '--detach', '--timeout', '120']), 'create').trim();
  made.push(id);
  assert.match(id, /^[a-z0-9]+$/);

  const listed = ok(await e2b(['sandbox', 'list', '--format', 'json']), 'list');
  assert.ok(ids(listed).includes(id), listed);
  const one = JSON.parse(listed.trim()).find((s) => s.sandboxId === id);
  assert.equal(one.templateId, 'base');
  assert.equal(one.state, 'running');

  const info = JSON.parse(ok(await e2b(['sandbox', 'info', id, '--format', 'json']), 'info'));
  assert.equal(info.sandboxId, id);
  assert.equal(info.state, 'running');

  const ran = await e2b(['sandbox', 'exec', id, 'sh', '-c', 'echo from-$((6*7)); echo warn >&2; exit 3']);
  assert.equal(ran.code, 3, `exec exit: ${ran.code} ${ran.err}`);
  assert.equal(ran.out, 'from-42\n');
  assert.match(ran.err, /warn/);

  // abxd's own events are among the logs: "created from template base".
  const logs = ok(await e2b(['sandbox', 'logs', id, '--format', 'json']), 'logs');
  const entries = logs.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  const created = entries.find((e) => /created/.test(e.message));
  assert.ok(created, logs);
  assert.equal(created.level, 'info');
  assert.equal(created.logger, 'abxd');

  const metrics = await e2b(['sandbox', 'metrics', id, '--format', 'json']);
  ok(metrics, 'metrics');
  for (const line of metrics.out.split('\n').filter((l) => l.startsWith('{'))) {
    const m = JSON.parse(line);
    assert.equal(typeof m.cpuCount, 'number', line);
  }
});

test('e2b sandbox list filters by state and metadata; pause, resume, kill', async () => {
  const tagged = await Sandbox.create('base', { metadata: { owner: 'cli-test' }, timeoutMs: 120000 });
  made.push(tagged.sandboxId);
  const other = await Sandbox.create('base', { timeoutMs: 120000 });
  made.push(other.sandboxId);

  const byMeta = ids(ok(await e2b(['sandbox', 'list', '-m', 'owner=cli-test', '--format', 'json']), 'list -m'));
  assert.deepEqual(byMeta, [tagged.sandboxId]);

  assert.match(ok(await e2b(['sandbox', 'pause', tagged.sandboxId]), 'pause'), /has been paused/);
  const paused = ids(ok(await e2b(['sandbox', 'list', '-s', 'paused', '--format', 'json']), 'list -s paused'));
  assert.deepEqual(paused, [tagged.sandboxId]);
  const running = ids(ok(await e2b(['sandbox', 'list', '--format', 'json']), 'list running'));
  assert.ok(!running.includes(tagged.sandboxId));
  assert.ok(running.includes(other.sandboxId));

  assert.match(ok(await e2b(['sandbox', 'resume', tagged.sandboxId]), 'resume'), /has been resumed/);
  const back = await e2b(['sandbox', 'exec', tagged.sandboxId, 'echo', 'back']);
  assert.equal(ok(back, 'exec after resume'), 'back\n');

  ok(await e2b(['sandbox', 'kill', other.sandboxId]), 'kill');
  await assert.rejects(Sandbox.getFullInfo(other.sandboxId), NotFoundError);

  const all = ok(await e2b(['sandbox', 'kill', '--all', '-m', 'owner=cli-test']), 'kill --all');
  assert.match(all, /Killed 1 running sandboxes/);
  assert.deepEqual(ids(ok(await e2b(['sandbox', 'list', '--format', 'json']), 'list after kill')).filter(
    (i) => i === tagged.sandboxId), []);
});

test('e2b template list shows the built-in templates', async () => {
  const out = ok(await e2b(['template', 'list', '--format', 'json']), 'template list');
  const templates = JSON.parse(out.trim());
  const names = templates.flatMap((t) => t.aliases ?? []);
  assert.ok(names.includes('base'), out);
});

test('e2b template create builds a Dockerfile; a sandbox of it has its files and env', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'abx-cli-tpl-'));
  try {
    const stamp = `cli-${Date.now()}`; // new each run: a shared build cache cannot answer for it
    writeFileSync(join(dir, 'hello.txt'), 'copied by the CLI\n');
    writeFileSync(join(dir, 'e2b.Dockerfile'),
      `FROM e2bdev/base\nCOPY hello.txt /opt/hello.txt\nRUN echo ${stamp} > /opt/stamp\nENV CLI_VAR=from-cli\n`);
    const built = await e2b(['template', 'create', 'cli-tpl', '--path', dir]);
    ok(built, 'template create');
    assert.match(built.out, /Found .*e2b\.Dockerfile/);

    const names = JSON.parse(ok(await e2b(['template', 'list', '--format', 'json']), 'list').trim())
      .flatMap((t) => t.aliases ?? []);
    assert.ok(names.includes('cli-tpl'), names.join(','));

    const sbx = await Sandbox.create('cli-tpl', { timeoutMs: 120000 });
    made.push(sbx.sandboxId);
    const r = await sbx.commands.run('cat /opt/hello.txt /opt/stamp; echo $CLI_VAR; pwd; whoami');
    assert.equal(r.stdout, `copied by the CLI\n${stamp}\nfrom-cli\n/home/user\nuser\n`);

    const bad = await e2b(['template', 'create', 'Bad Name!', '--path', dir]);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /not valid/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the CLI reports an unknown sandbox and a missing API key as errors', async () => {
  const missing = await e2b(['sandbox', 'info', 'nosuchsandbox0000']);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /wasn't found/);

  const badKey = await e2b(['sandbox', 'list', '--format', 'json'], { E2B_API_KEY: 'e2b_0000' });
  assert.equal(badKey.code, 1);
  assert.match(badKey.err, /401|[Uu]nauthori[sz]ed|[Ii]nvalid API key/);

  const noKey = await e2b(['sandbox', 'list'], { E2B_API_KEY: '' });
  assert.equal(noKey.code, 1);
  assert.match(noKey.err, /logged in|E2B_API_KEY/);
});
