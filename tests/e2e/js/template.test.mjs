// Templates as code (issue 39 item 3): the official SDK's Template builder against a real abxd.
// Template.build with onBuildLogs, then Sandbox.create of the built template (files, env,
// workdir, symlink, user, start command); fromDockerfile, fromImage of a loopback registry
// (docker-registry); buildInBackground + getBuildStatus with a logs offset,
// the /logs cursor, Template.exists, tags; failures: a failing runCmd (its output in the logs, the
// build in error), an unknown fromTemplate, a bad step, unknown templates and builds, pipInstall
// and aptInstall without a package mirror. fromBaseImage() needs the `base` image
// (ABX_IMAGE_STORE, scripts/build-images.sh); the other tests stand on a busybox template built
// here through POST /templates/build (busybox-static). abxd builds into an image store of this
// test's own (abxd.mjs privateImageStore: the shared store's `base`, hard-linked, never written).
// Then what outlives an abxd restart (build status, logs, tags, exists; a build cut short ends as
// error), readyCmd (create waits for it; one that never succeeds fails the create, leaving
// nothing), `name:tag` in create, skipCache, and cpuCount/memoryMB as the sandboxes' defaults.
//
//   ABXD_BIN=build/dev/src/platform/abxd node --test template.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BuildError, Sandbox, Template, waitForFile } from 'e2b';
import { create as tarCreate } from 'tar';

import { privateImageStore, startAbxd } from './abxd.mjs';

const busybox = '/bin/busybox';
let daemon;
let work;
let haveBusybox = false;
// The RUNs whose output a test reads are new each run (a unique line), whatever a cache holds.
const nonce = Math.random().toString(16).slice(2);

// The busybox image every test builds on: a root and a `user` (uid 1000), as E2B's base has.
const bbDockerfile = `FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/sh", "-c", "mkdir -p /etc /tmp /root /home/user && chmod 1777 /tmp && printf 'root:x:0:0:root:/root:/bin/sh\\\\nuser:x:1000:1000::/home/user:/bin/sh\\\\n' > /etc/passwd && printf 'root:x:0:\\\\nuser:x:1000:\\\\n' > /etc/group && chown 1000:1000 /home/user"]
ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin
`;

function headers() {
  return { 'X-API-KEY': process.env.E2B_API_KEY };
}

async function buildBusybox(name) {
  const dir = join(work, `ctx-${name}`);
  mkdirSync(dir, { recursive: true });
  copyFileSync(busybox, join(dir, 'busybox'));
  writeFileSync(join(dir, 'Dockerfile'), bbDockerfile);
  const tarFile = join(work, `${name}.tar`);
  await tarCreate({ cwd: dir, file: tarFile }, ['busybox', 'Dockerfile']);
  const { readFileSync } = await import('node:fs');
  const res = await fetch(`${daemon.baseUrl}/templates/build?name=${name}`, {
    method: 'POST',
    headers: headers(),
    body: readFileSync(tarFile),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  const last = JSON.parse(text.trim().split('\n').pop());
  assert.equal(last.type, 'done', text);
}

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'abx-js-template-'));
  const { store } = privateImageStore(work);
  // A ready command that never succeeds fails the create after 5 s.
  // --sandbox-pool 0: the pool would boot sandboxes of the templates built here in the
  // background, and a test below counts the run directories a failed create leaves.
  daemon = await startAbxd('template', ['--image-store', store, '--server-ready-timeout', '5',
    '--sandbox-pool', '0']);
  haveBusybox = existsSync(busybox);
  if (haveBusybox) await buildBusybox('bb');
});

after(async () => {
  if (daemon) await daemon.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

// The copy context: a directory and two files.
function filesDir(name) {
  const dir = join(work, name);
  mkdirSync(join(dir, 'app', 'sub'), { recursive: true });
  writeFileSync(join(dir, 'app', 'hello.txt'), 'hello from copy\n');
  writeFileSync(join(dir, 'app', 'sub', 'deep.txt'), 'deep\n');
  writeFileSync(join(dir, 'config.json'), '{"a": 1}\n');
  return dir;
}

async function poll(fn, what) {
  for (let i = 0; i < 200; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test('Template.build: copy, runCmd, setEnvs, setWorkdir, makeSymlink, setUser, setStartCmd; a sandbox of it', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  const ctx = filesDir('files1');
  const template = Template({ fileContextPath: ctx })
    .fromTemplate('bb')
    .copy('app', '/srv/app/')
    .copy('config.json', '/etc/myconf.json', { mode: 0o600 })
    .runCmd(`echo built > /built.txt && echo step-output-line ${nonce}`)
    .setEnvs({ GREETING: 'hello world', QUOTED: 'a "b" \\c' })
    .setWorkdir('/srv/app')
    .runCmd('pwd > /workdir.txt')
    .makeSymlink('/srv/app/hello.txt', '/link.txt')
    .runCmd('id -u > /root/as-root.txt', { user: 'root' })
    .setUser('user')
    .runCmd('id -u > /tmp/uid.txt')
    // (waitForPort's `ss` is not in busybox: the ready command is the start command's file.)
    .setStartCmd('echo started > /tmp/started; exec httpd -f -p 8080', waitForFile('/tmp/started'));
  const logs = [];
  const info = await Template.build(template, 'app1', { onBuildLogs: (e) => logs.push(e) });
  assert.equal(info.templateId, 'app1');
  assert.equal(info.name, 'app1');
  assert.match(info.buildId, /^[0-9a-f-]{36}$/);
  const messages = logs.map((e) => e.message);
  assert.ok(messages.some((m) => m.includes('step-output-line')), messages.join('\n'));
  assert.ok(messages.some((m) => m.startsWith('Uploaded')), messages.join('\n'));
  assert.ok(messages.some((m) => m.includes('is ready')), messages.join('\n'));
  const status = await Template.getBuildStatus(info);
  assert.equal(status.status, 'ready');

  const sb = await Sandbox.create('app1');
  daemon.made.push(sb.sandboxId);
  assert.equal(await sb.files.read('/srv/app/hello.txt'), 'hello from copy\n');
  assert.equal(await sb.files.read('/srv/app/sub/deep.txt'), 'deep\n');
  assert.equal(await sb.files.read('/etc/myconf.json', { user: 'root' }), '{"a": 1}\n');
  assert.equal(await sb.files.read('/built.txt'), 'built\n');
  assert.equal(await sb.files.read('/workdir.txt'), '/srv/app\n');
  assert.equal(await sb.files.read('/root/as-root.txt', { user: 'root' }), '0\n');
  assert.equal(await sb.files.read('/tmp/uid.txt'), '1000\n');
  const r = await sb.commands.run('echo "$GREETING|$QUOTED"; pwd; readlink /link.txt; stat -c %a /etc/myconf.json');
  assert.equal(r.stdout, 'hello world|a "b" \\c\n/srv/app\n/srv/app/hello.txt\n600\n');
  // The start command runs in every sandbox of the template, and the create answered once its
  // ready command (the file it writes) succeeded.
  assert.equal(await sb.files.read('/tmp/started'), 'started\n');
  // A second build of the same template: every COPY's files are already here.
  const logs2 = [];
  await Template.build(template, 'app1', { onBuildLogs: (e) => logs2.push(e) });
  assert.ok(logs2.some((e) => e.message.startsWith('Skipping upload')), logs2.map((e) => e.message).join('\n'));
  assert.ok(logs2.some((e) => e.message.startsWith('CACHED')), logs2.map((e) => e.message).join('\n'));
});

test('buildInBackground, getBuildStatus with logsOffset, /logs cursor, Template.exists, tags', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  assert.equal(await Template.exists('app2'), false);
  const template = Template().fromTemplate('bb').runCmd(`echo background-line ${nonce}`).setEnvs({ X: '1' });
  const info = await Template.buildInBackground(template, 'app2:v1', { tags: ['stable'] });
  assert.equal(info.templateId, 'app2');
  assert.deepEqual(info.tags.sort(), ['stable', 'v1']);
  let offset = 0;
  const seen = [];
  const final = await poll(async () => {
    const s = await Template.getBuildStatus(info, { logsOffset: offset });
    offset += s.logEntries.length;
    seen.push(...s.logEntries.map((e) => e.message));
    return s.status === 'ready' || s.status === 'error' ? s : null;
  }, 'the background build');
  assert.equal(final.status, 'ready', seen.join('\n'));
  // The rest of the log after the final status, then nothing more from the offset.
  for (;;) {
    const s = await Template.getBuildStatus(info, { logsOffset: offset });
    if (s.logEntries.length === 0) break;
    offset += s.logEntries.length;
    seen.push(...s.logEntries.map((e) => e.message));
  }
  assert.ok(seen.some((m) => m.includes('background-line')), seen.join('\n'));
  assert.equal(seen.filter((m) => m === `background-line ${nonce}`).length, 1, seen.join('\n')); // once, offsets never repeat

  // E2B's logs route: forward from a cursor, backward newest first, level filter.
  const url = `${daemon.baseUrl}/templates/app2/builds/${info.buildId}/logs`;
  const fwd = await (await fetch(`${url}?limit=2`, { headers: headers() })).json();
  assert.equal(fwd.logs.length, 2);
  const next = await (await fetch(`${url}?cursor=${Date.parse(fwd.logs[1].timestamp)}`, { headers: headers() })).json();
  assert.ok(next.logs.length >= 1);
  const back = await (await fetch(`${url}?direction=backward&limit=1`, { headers: headers() })).json();
  assert.match(back.logs[0].message, /is ready/);
  const errs = await (await fetch(`${url}?level=error`, { headers: headers() })).json();
  assert.deepEqual(errs.logs, []);

  assert.equal(await Template.exists('app2'), true);
  const tags = (await Template.getTags('app2')).map((x) => x.tag).sort();
  assert.deepEqual(tags, ['stable', 'v1']);
  const assigned = await Template.assignTags('app2:v1', 'production');
  assert.equal(assigned.buildId, info.buildId);
  await Template.removeTags('app2', 'stable');
  assert.deepEqual((await Template.getTags('app2')).map((x) => x.tag).sort(), ['production', 'v1']);
  await assert.rejects(Template.removeTags('app2', 'nope'), /nope/);
  await assert.rejects(Template.assignTags('app2:nope', 'x'), /nope/);
});

test('failures: a failing runCmd, an unknown fromTemplate, a bad step, unknown builds', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  const logs = [];
  const failing = Template().fromTemplate('bb').runCmd(`echo boom-output ${nonce}; exit 7`);
  await assert.rejects(
    Template.build(failing, 'broken', { onBuildLogs: (e) => logs.push(e) }),
    (e) => e instanceof BuildError && /exited with 7/.test(e.message),
  );
  assert.ok(logs.some((e) => e.message.includes('boom-output')), logs.map((e) => e.message).join('\n'));
  assert.ok(logs.some((e) => e.level === 'error'), logs.map((e) => e.message).join('\n'));
  await assert.rejects(Sandbox.create('broken'));

  await assert.rejects(
    Template.build(Template().fromTemplate('no-such-template').runCmd('true'), 'orphan'),
    (e) => e instanceof BuildError && /no-such-template/.test(e.message),
  );

  // A step the builder does not know, straight at the API: a 400 naming it, nothing started.
  const req = await fetch(`${daemon.baseUrl}/v3/templates`, {
    method: 'POST',
    headers: { ...headers(), 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'rawbad' }),
  });
  assert.equal(req.status, 202);
  const { templateID, buildID } = await req.json();
  const bad = await fetch(`${daemon.baseUrl}/v2/templates/${templateID}/builds/${buildID}`, {
    method: 'POST',
    headers: { ...headers(), 'content-type': 'application/json' },
    body: JSON.stringify({ fromTemplate: 'bb', steps: [{ type: 'FROB', args: ['x'] }] }),
  });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).message, /step 1: unknown step type 'FROB'/);
  // A COPY whose files were never uploaded.
  const nofiles = await fetch(`${daemon.baseUrl}/v2/templates/${templateID}/builds/${buildID}`, {
    method: 'POST',
    headers: { ...headers(), 'content-type': 'application/json' },
    body: JSON.stringify({ fromTemplate: 'bb', steps: [{ type: 'COPY', args: ['a', '/a'], filesHash: 'ab'.repeat(32) }] }),
  });
  assert.equal(nofiles.status, 400);
  assert.match((await nofiles.json()).message, /were not uploaded/);
  // An upload URL is one-time and needs its token.
  const link = await (await fetch(`${daemon.baseUrl}/templates/${templateID}/files/${'cd'.repeat(32)}`, { headers: headers() })).json();
  assert.equal(link.present, false);
  const noToken = await fetch(link.url.replace(/\?token=.*/, ''), { method: 'PUT', body: 'x' });
  assert.equal(noToken.status, 401);

  await assert.rejects(Template.getBuildStatus({ templateId: 'nope', buildId: buildID }), /404|not found/);
  await assert.rejects(Template.getBuildStatus({ templateId: templateID, buildId: 'nope' }), /404|not found/);
  await assert.rejects(Sandbox.create('no-such-template'));
});

test('fromDockerfile: the SDK parses it into steps; FROM a template of abxd', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  const ctx = filesDir('files3');
  const template = Template({ fileContextPath: ctx }).fromDockerfile(
    'FROM bb\nENV A=from-dockerfile\nWORKDIR /w\nCOPY config.json /w/\nRUN echo df > /df.txt\nUSER user\n',
  );
  await Template.build(template, 'fromdf');
  const sb = await Sandbox.create('fromdf');
  daemon.made.push(sb.sandboxId);
  assert.equal(await sb.files.read('/df.txt'), 'df\n');
  assert.equal(await sb.files.read('/w/config.json'), '{"a": 1}\n');
  assert.equal((await sb.commands.run('echo $A; id -u')).stdout, 'from-dockerfile\n1000\n');
});

// A port nothing listens on (for the loopback registry).
async function freePort() {
  const srv = createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

test('fromImage: an image of a loopback registry (docker-registry)', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  if (!existsSync('/usr/bin/docker-registry')) return t.skip('needs docker-registry');
  const port = await freePort();
  const dir = join(work, 'registry');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.yml'),
    `version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: 127.0.0.1:${port}\n`);
  const registry = spawn('/usr/bin/docker-registry', ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  try {
    await poll(async () => (await fetch(`http://127.0.0.1:${port}/v2/`).catch(() => null))?.status === 200, 'docker-registry');
    // The busybox template, pushed as a plain image (abx's own push).
    const ref = `127.0.0.1:${port}/abx/bb:1`;
    const pushed = await fetch(`${daemon.baseUrl}/templates/bb/push`, {
      method: 'POST',
      headers: { ...headers(), 'content-type': 'application/json' },
      body: JSON.stringify({ ref, bare: true }),
    });
    assert.equal(pushed.status, 200, await pushed.clone().text());
    const template = Template().fromImage(ref).runCmd('echo on-registry-image > /reg.txt');
    await Template.build(template, 'fromreg');
    const sb = await Sandbox.create('fromreg');
    daemon.made.push(sb.sandboxId);
    assert.equal(await sb.files.read('/reg.txt'), 'on-registry-image\n');
  } finally {
    registry.kill('SIGTERM');
  }
});

test('pipInstall and aptInstall fail clearly without a package mirror', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  for (const [template, name] of [
    [Template().fromTemplate('bb').pipInstall('requests'), 'pip'],
    [Template().fromTemplate('bb').aptInstall('curl'), 'apt'],
  ]) {
    const logs = [];
    await assert.rejects(
      Template.build(template, `offline-${name}`, { onBuildLogs: (e) => logs.push(e) }),
      (e) => e instanceof BuildError && /exited with/.test(e.message) && /package index or mirror/.test(e.message),
    );
    assert.ok(logs.some((e) => e.level === 'error'), logs.map((e) => e.message).join('\n'));
  }
});

test('fromBaseImage() is abx:base, no registry', async (t) => {
  const img = await fetch(`${daemon.baseUrl}/templates/base/image`, { headers: headers() });
  if (img.status !== 200) return t.skip('needs the base image (scripts/build-images.sh)');
  const template = Template().fromBaseImage().runCmd('echo from-base > /from-base.txt').setWorkdir('/home/user').setUser('user');
  await Template.build(template, 'on-base');
  const sb = await Sandbox.create('on-base');
  daemon.made.push(sb.sandboxId);
  assert.equal(await sb.files.read('/from-base.txt'), 'from-base\n');
  assert.equal((await sb.commands.run('python3 -c "print(6*7)"')).stdout, '42\n');
});

test('an abxd restart keeps build status, logs, tags and exists; a build it cut short ends as error', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  const done = await Template.build(Template().fromTemplate('bb').runCmd(`echo kept-line ${nonce}`), 'kept:v1', { tags: ['stable'] });
  // A build still running when abxd stops.
  const running = await Template.buildInBackground(Template().fromTemplate('bb').runCmd(`echo cut-${nonce}; sleep 120`), 'cut');
  await poll(async () => {
    const s = await Template.getBuildStatus(running);
    return s.status === 'building' && s.logEntries.some((e) => e.message.includes(`cut-${nonce}`));
  }, 'the long build to run its step');
  await daemon.restart();

  const s = await Template.getBuildStatus(done);
  assert.equal(s.status, 'ready');
  const messages = s.logEntries.map((e) => e.message);
  assert.ok(messages.some((m) => m === `kept-line ${nonce}`), messages.join('\n'));
  assert.ok(messages.some((m) => m.includes('is ready')), messages.join('\n'));
  assert.equal(await Template.exists('kept'), true);
  assert.deepEqual((await Template.getTags('kept')).map((x) => x.tag).sort(), ['stable', 'v1']);
  const logs = await (await fetch(`${daemon.baseUrl}/templates/kept/builds/${done.buildId}/logs?direction=backward&limit=1`, { headers: headers() })).json();
  assert.match(logs.logs[0].message, /is ready/);
  // Tags still move after the restart, and are kept.
  await Template.assignTags('kept:v1', 'after-restart');
  assert.ok((await Template.getTags('kept')).some((x) => x.tag === 'after-restart'));

  const cut = await Template.getBuildStatus(running);
  assert.equal(cut.status, 'error');
  assert.match(cut.reason.message, /abxd was stopped during the build|abxd restarted/);
  assert.ok(cut.logEntries.some((e) => e.message.includes(`cut-${nonce}`)), JSON.stringify(cut.logEntries));
  const sb = await Sandbox.create('kept');
  daemon.made.push(sb.sandboxId);
  assert.equal((await sb.commands.run('echo ok')).stdout, 'ok\n');
});

test('readyCmd: create returns once it succeeds; one that never does fails the create and leaves nothing', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  await Template.build(
    Template().fromTemplate('bb').setStartCmd('sleep 1; echo up > /tmp/ready-flag; exec sleep 1000', 'test -f /tmp/ready-flag'),
    'ready-ok',
  );
  const t0 = Date.now();
  const sb = await Sandbox.create('ready-ok');
  daemon.made.push(sb.sandboxId);
  // The file exists as soon as create returns: it waited for the ready command.
  assert.equal(await sb.files.read('/tmp/ready-flag'), 'up\n');
  assert.ok(Date.now() - t0 >= 900, `create returned after ${Date.now() - t0} ms`);

  await Template.build(
    Template().fromTemplate('bb').setStartCmd('exec sleep 1000', `echo not-ready-${nonce}; exit 3`),
    'ready-never',
  );
  const { readdirSync } = await import('node:fs');
  const runDirs = () => readdirSync(join(daemon.home, 'run')).sort();
  const before = runDirs();
  const t1 = Date.now();
  await assert.rejects(Sandbox.create('ready-never'), (e) => {
    assert.match(e.message, /ready command/);
    assert.match(e.message, /exited with 3/);
    assert.match(e.message, new RegExp(`not-ready-${nonce}`));
    return true;
  });
  assert.ok(Date.now() - t1 >= 4500, `the failed create took ${Date.now() - t1} ms (timeout 5 s)`);
  assert.deepEqual(runDirs(), before);
  const listed = await Sandbox.list().nextItems();
  assert.ok(!listed.some((x) => x.templateId === 'ready-never'), JSON.stringify(listed));
});

test('name:tag in create, skipCache, and cpuCount/memoryMB as the sandboxes\' defaults', async (t) => {
  if (!haveBusybox) return t.skip(`needs busybox-static (${busybox})`);
  const stamp = Template().fromTemplate('bb').runCmd('cat /proc/sys/kernel/random/uuid > /stamp');
  const first = await Template.build(stamp, 'tagged:v1', { cpuCount: 2, memoryMB: 768 });
  const a = await Sandbox.create('tagged:v1');
  daemon.made.push(a.sandboxId);
  const stampA = await a.files.read('/stamp');
  const info = await a.getInfo();
  assert.equal(info.templateId, 'tagged');
  assert.equal(info.cpuCount, 2);
  assert.equal(info.memoryMB, 768);
  await assert.rejects(Sandbox.create('tagged:nope'), /nope/);

  // The same steps again: cached; with skipCache every step runs again.
  const cached = [];
  await Template.build(stamp, 'tagged:v1', { onBuildLogs: (e) => cached.push(e.message) });
  assert.ok(cached.some((m) => m.startsWith('CACHED') && m.includes('/stamp')), cached.join('\n'));
  const forced = [];
  const second = await Template.build(stamp, 'tagged:v2', { skipCache: true, onBuildLogs: (e) => forced.push(e.message) });
  // (FROM is always taken from the store: its line says CACHED; no step after it does.)
  assert.ok(!forced.some((m) => m.startsWith('CACHED') && !m.includes(' FROM ')), forced.join('\n'));
  assert.ok(forced.some((m) => m.startsWith('[builder') && m.includes('/stamp')), forced.join('\n'));
  const b = await Sandbox.create('tagged:v2');
  daemon.made.push(b.sandboxId);
  assert.notEqual(await b.files.read('/stamp'), stampA);
  // No cpuCount/memoryMB this time: the template's defaults are abx's again.
  const binfo = await b.getInfo();
  assert.equal(binfo.memoryMB, 512);
  // v1 names an older build, whose image the template no longer serves: a clear refusal.
  await assert.rejects(Sandbox.create('tagged:v1'), /tag 'v1' names build/);
  assert.notEqual(first.buildId, second.buildId);
  const plain = await Sandbox.create('tagged');
  daemon.made.push(plain.sandboxId);
  assert.equal(await plain.files.read('/stamp'), await b.files.read('/stamp'));
});
