// abxd --cluster drain (issue 43) with the official e2b JS SDK: one etcd member and two abxd
// nodes on loopback, each with its own home and --sandbox-net range. Sandboxes made on node 2
// move to node 1 when node 2 is drained: running ones go on there with the same id, token,
// files, metadata, deadline and running processes; paused ones (to disk with their memory, and
// filesystem-only) stay paused there and resume there with their files and processes. Then node
// 2 is undrained and takes new sandboxes again.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test drain.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { clusterNode, etcdRange, placements, sleep, startEtcd, startNode, stop, useNode } from './procs.mjs';

const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;

const dir = mkdtempSync(join(tmpdir(), 'abx-drain-'));
let etcd; // {client, peer, proc}
const nodes = []; // {name, port, home, args, proc, key, url}
const made = []; // [id, node index]

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  etcd = await startEtcd(dir);
  const secretFile = join(dir, 'cluster-secret');
  writeFileSync(secretFile, randomBytes(24).toString('hex'), { mode: 0o600 });
  for (const [i, name] of ['n1', 'n2'].entries()) {
    const n = await clusterNode(dir, i, name, {
      net: '10.216', endpoints: `http://127.0.0.1:${etcd.client}`, secretFile, ttl: 5,
      extra: ['--pause', 'disk', '--cluster-capacity', String(10 * (i + 1))],
    });
    if (name === 'n2') {
      // A template node 1 lacks: a sandbox of it cannot move there.
      mkdirSync(join(n.home, 'templates', 'only2'), { recursive: true });
      writeFileSync(join(n.home, 'templates', 'only2', 'template.yaml'), 'id: only2\n');
    }
    nodes.push(n);
  }
  await Promise.all(nodes.map(startNode));
  for (const n of nodes) n.key = readFileSync(join(n.home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  for (const [id, i] of made) {
    useNode(nodes[i]);
    await Sandbox.kill(id).catch(() => {});
  }
  for (const n of nodes) await stop(n.proc, 'SIGTERM');
  await stop(etcd?.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

// GET /sandboxes/{id} through node `n` with its key.
async function info(n, id) {
  const r = await fetch(`${n.url}/sandboxes/${id}`, { headers: { 'X-API-KEY': n.key } });
  assert.equal(r.status, 200, `GET ${id} through ${n.name}: ${r.status}`);
  return r.json();
}

// The pid of the process `pgrep ARGS` finds in `sbx`, once there is one (a command started in
// the background with setsid may not have run yet when the command that started it returns).
async function pidOf(sbx, args) {
  for (let i = 0; ; i++) {
    // pgrep exits 1 when it finds none (the SDK throws); run alone, so that no shell around it
    // has "while true" in its command line.
    const pid = await sbx.commands.run(`pgrep ${args}`).then((r) => r.stdout.trim(), () => '');
    if (/^\d+$/.test(pid)) return pid;
    assert.ok(i < 50, `pgrep ${args} found no process (${JSON.stringify(pid)})`);
    await sleep(100);
  }
}

// A counter in its own session: it outlives the command that started it. Its pid.
async function startCounter(sbx) {
  await sbx.commands.run("setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; " +
    "sleep 0.2; done' >/dev/null 2>&1 </dev/null &");
  const pid = await pidOf(sbx, '-f "while true"');
  await sleep(500);
  return pid;
}

const count = async (sbx) => Number((await sbx.commands.run('cat /tmp/count')).stdout.trim());

test("drain: node 2's running and paused sandboxes go on on node 1 with their ids, files and " +
  'processes; an undrain makes node 2 placeable again', async () => {
  // Sandboxes placed on node 2, which has the most free slots (20 to node 1's 10).
  useNode(nodes[1]);
  const create = async (template, who) => {
    const s = await Sandbox.create(template, { metadata: { who }, timeoutMs: 600_000 });
    made.push([s.sandboxId, 1]);
    assert.equal((await placements([etcd.client]))[s.sandboxId], 'n2');
    return s;
  };
  const a = await create('base', 'a'); // running, a file and a counter
  const b = await create('base', 'b'); // running
  const stay = await create('only2', 'stay'); // running, cannot move
  const pm = await create('base', 'pm'); // paused with its memory (to disk)
  const pf = await create('base', 'pf'); // paused without it (filesystem-only)
  const ps = await create('only2', 'ps'); // paused, cannot move
  const pd = await create('base', 'pd'); // paused through node 1 while the drain runs
  await stay.commands.run("setsid sh -c 'sleep 1000' >/dev/null 2>&1 </dev/null &");
  const stayPid = await pidOf(stay, '-x sleep');
  await a.files.write('/home/user/note.txt', 'written on node 2');
  const pid = await startCounter(a);
  const before = await info(nodes[1], a.sandboxId);

  await pm.files.write('/home/user/note.txt', 'pm: written on node 2');
  const pmPid = await startCounter(pm);
  const pmCounted = await count(pm);
  assert.equal(await pm.pause(), true);
  assert.ok(existsSync(join(nodes[1].home, 'checkpoints', pm.sandboxId, 'checkpoint.json')));
  const pmBefore = await info(nodes[1], pm.sandboxId);
  await pf.files.write('/home/user/note.txt', 'pf: written on node 2');
  assert.equal(await pf.pause({ keepMemory: false }), true);
  assert.ok(existsSync(join(nodes[1].home, 'checkpoints', pf.sandboxId, 'rw.img')));
  assert.ok(!existsSync(join(nodes[1].home, 'checkpoints', pf.sandboxId, 'checkpoint.json')));
  await ps.files.write('/home/user/note.txt', 'ps: written on node 2');
  assert.equal(await ps.pause(), true);
  await pd.files.write('/home/user/note.txt', 'pd: written on node 2');
  for (const s of [pm, pf, ps]) assert.equal((await info(nodes[1], s.sandboxId)).state, 'paused');

  // Drain node 2; once it is draining, pd is paused through node 1 (wherever pd is then: not
  // reached yet, being moved, or moved already).
  const t0 = Date.now();
  const draining = fetch(`${nodes[1].url}/abx/cluster/drain`,
    { method: 'POST', headers: { 'X-API-KEY': nodes[1].key } });
  for (let i = 0; ; i++) {
    const n2 = (await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n2'];
    if (n2.draining) break;
    assert.ok(i < 200, 'node 2 is marked draining');
    await sleep(50);
  }
  const pdPause = await fetch(`${nodes[0].url}/sandboxes/${pd.sandboxId}/pause`,
    { method: 'POST', headers: { 'X-API-KEY': nodes[0].key } });
  assert.equal(pdPause.status, 204, await pdPause.text());
  const r = await draining;
  const body = await r.json();
  console.log(`drain of 7 sandboxes took ${Date.now() - t0} ms: ${JSON.stringify(body)}`);
  assert.equal(r.status, 200, JSON.stringify(body));
  assert.equal(body.node, 'n2');
  assert.equal(body.draining, true);
  assert.equal(body.moved, 5);
  assert.equal(body.notMoved, 2);
  assert.deepEqual(body.otherTeams, { moved: 0, notMoved: 0 });
  assert.equal(body.sandboxes.length, 7);
  const moved = Object.fromEntries(body.sandboxes.map((s) => [s.sandboxID, s]));
  for (const [s, state] of [[a, 'running'], [b, 'running'], [pm, 'paused'], [pf, 'paused']]) {
    assert.equal(moved[s.sandboxId].node, 'n1', JSON.stringify(moved[s.sandboxId]));
    assert.equal(moved[s.sandboxId].state, state, JSON.stringify(moved[s.sandboxId]));
  }
  // pd moved as it was when its turn came: running (and then paused on node 1) or paused.
  assert.equal(moved[pd.sandboxId].node, 'n1', JSON.stringify(moved[pd.sandboxId]));
  assert.match(moved[pd.sandboxId].state, /^(running|paused)$/);
  // The two node 1 cannot take stay on node 2, as they were: nothing is lost.
  for (const [s, state] of [[stay, 'running'], [ps, 'paused']]) {
    assert.match(moved[s.sandboxId].error, /template 'only2' is not on this node/);
    assert.equal(moved[s.sandboxId].node, undefined);
    assert.equal(moved[s.sandboxId].state, state);
  }
  const map = await placements([etcd.client]);
  for (const s of [a, b, pm, pf, pd]) assert.equal(map[s.sandboxId], 'n1', s.sandboxId);
  for (const s of [stay, ps]) assert.equal(map[s.sandboxId], 'n2', s.sandboxId);
  for (const m of made) m[1] = map[m[0]] === 'n1' ? 0 : 1;

  // Node 2 has nothing of the moved ones left; the paused ones' files are on node 1.
  const secret = readFileSync(join(dir, 'cluster-secret'), 'utf8');
  const left = await (await fetch(`${nodes[1].url}/v2/sandboxes`, {
    headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } })).json();
  assert.deepEqual(Object.fromEntries(left.map((s) => [s.sandboxID, s.state])),
    { [stay.sandboxId]: 'running', [ps.sandboxId]: 'paused' });
  for (const s of [a, b, pm, pf, pd]) {
    assert.equal(existsSync(join(nodes[1].home, 'run', s.sandboxId)), false);
    assert.equal(existsSync(join(nodes[1].home, 'checkpoints', s.sandboxId)), false);
  }
  assert.ok(existsSync(join(nodes[0].home, 'checkpoints', pm.sandboxId, 'checkpoint.json')));
  assert.ok(existsSync(join(nodes[0].home, 'checkpoints', pf.sandboxId, 'rw.img')));
  assert.ok(existsSync(join(nodes[1].home, 'checkpoints', ps.sandboxId, 'checkpoint.json')));

  // Through node 1, with node 1's key: the same sandbox, its file, its process, its token.
  useNode(nodes[0]);
  const a1 = await Sandbox.connect(a.sandboxId);
  assert.equal(await a1.files.read('/home/user/note.txt'), 'written on node 2');
  assert.equal((await a1.commands.run('pgrep -f "while true"')).stdout.trim(), pid);
  const c1 = await count(a1);
  await sleep(1000);
  const c2 = await count(a1);
  assert.ok(c2 > c1, `the counter goes on (${c1} then ${c2})`);
  assert.equal((await a1.commands.run('echo moved')).stdout, 'moved\n');
  const b1 = await Sandbox.connect(b.sandboxId);
  assert.equal((await b1.commands.run('echo b')).stdout, 'b\n');
  // The one that stayed, through node 1 (relayed to node 2): its process is still there.
  const stay1 = await Sandbox.connect(stay.sandboxId);
  assert.equal((await stay1.commands.run('pgrep -x sleep')).stdout.trim(), stayPid);
  const aInfo = await info(nodes[0], a.sandboxId);
  assert.equal(aInfo.state, 'running');
  assert.deepEqual(aInfo.metadata, { who: 'a' });
  assert.equal(aInfo.envdAccessToken, before.envdAccessToken);
  assert.equal(aInfo.endAt, before.endAt);

  // The paused ones are paused on node 1, as they were on node 2.
  for (const s of [pm, pf, pd]) assert.equal((await info(nodes[0], s.sandboxId)).state, 'paused');
  const pmInfo = await info(nodes[0], pm.sandboxId);
  assert.deepEqual(pmInfo.metadata, { who: 'pm' });
  assert.equal(pmInfo.envdAccessToken, pmBefore.envdAccessToken);
  assert.equal(pmInfo.endAt, pmBefore.endAt);
  // Resumed through node 2, the old owner (relayed to node 1): its file, the same counting
  // process, its memory (the count goes on from where it was, not from 1).
  useNode(nodes[1]);
  const pm1 = await Sandbox.connect(pm.sandboxId);
  assert.equal((await placements([etcd.client]))[pm.sandboxId], 'n1');
  assert.equal((await info(nodes[0], pm.sandboxId)).state, 'running');
  assert.equal(await pm1.files.read('/home/user/note.txt'), 'pm: written on node 2');
  assert.equal((await pm1.commands.run('pgrep -f "while true"')).stdout.trim(), pmPid);
  const m1 = await count(pm1);
  assert.ok(m1 >= pmCounted, `the counter kept its count (${pmCounted} at the pause, now ${m1})`);
  await sleep(1000);
  const m2 = await count(pm1);
  assert.ok(m2 > m1, `the counter goes on (${m1} then ${m2})`);
  // Resumed through node 1: booted again on its files (filesystem-only), and the one paused
  // during the drain.
  useNode(nodes[0]);
  const pf1 = await Sandbox.connect(pf.sandboxId);
  assert.equal(await pf1.files.read('/home/user/note.txt'), 'pf: written on node 2');
  assert.equal((await pf1.commands.run('echo booted')).stdout, 'booted\n');
  assert.equal((await info(nodes[0], pf.sandboxId)).state, 'running');
  const pd1 = await Sandbox.connect(pd.sandboxId);
  assert.equal(await pd1.files.read('/home/user/note.txt'), 'pd: written on node 2');
  // The paused one that could not move resumes on node 2 (relayed there), its file kept.
  const ps1 = await Sandbox.connect(ps.sandboxId);
  assert.equal(await ps1.files.read('/home/user/note.txt'), 'ps: written on node 2');
  assert.equal((await placements([etcd.client]))[ps.sandboxId], 'n2');

  // Node 2 is draining: a create through it is placed on node 1.
  let n2 = (await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n2'];
  assert.equal(n2.draining, true);
  useNode(nodes[1]);
  const c = await Sandbox.create('base', { timeoutMs: 60_000 });
  made.push([c.sandboxId, 1]);
  assert.equal((await placements([etcd.client]))[c.sandboxId], 'n1');
  await c.kill();
  made.pop();

  // Undrain: the same route's DELETE, with an API key of node 2 (none: 401), any number of
  // times; node 2's record says so, and placement picks it again (18 free slots to node 1's 5).
  const undrain = (headers) =>
    fetch(`${nodes[1].url}/abx/cluster/drain`, { method: 'DELETE', headers });
  assert.equal((await undrain({})).status, 401);
  for (let i = 0; i < 2; i++) {
    const u = await undrain({ 'X-API-KEY': nodes[1].key });
    assert.equal(u.status, 200);
    assert.deepEqual(await u.json(), { node: 'n2', draining: false });
  }
  n2 = (await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n2'];
  assert.equal(n2.draining, false);
  useNode(nodes[0]);
  const d = await Sandbox.create('base', { timeoutMs: 60_000 });
  made.push([d.sandboxId, 0]);
  assert.equal((await placements([etcd.client]))[d.sandboxId], 'n2');
  assert.equal((await d.commands.run('echo placed')).stdout, 'placed\n');
  await d.kill();
  made.pop();

  // An undrain while a drain runs stops it after the sandbox it is moving. Node 1 is drained
  // (its five sandboxes, all running now, would go to node 2) and undrained as soon as its record
  // says draining, while its first move takes a second or more. Whichever way the two meet,
  // nothing is lost: each sandbox moved or stays, and answers.
  const drain1 = fetch(`${nodes[0].url}/abx/cluster/drain`,
    { method: 'POST', headers: { 'X-API-KEY': nodes[0].key } });
  for (let i = 0; ; i++) {
    const n1 = (await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n1'];
    if (n1.draining) break;
    assert.ok(i < 200, 'node 1 is marked draining');
    await sleep(50);
  }
  const u1 = await fetch(`${nodes[0].url}/abx/cluster/drain`,
    { method: 'DELETE', headers: { 'X-API-KEY': nodes[0].key } });
  assert.equal(u1.status, 200);
  const r1 = await drain1;
  const body1 = await r1.json();
  console.log(`drain of node 1, undrained while it ran: ${JSON.stringify(body1)}`);
  assert.equal(r1.status, 200, JSON.stringify(body1));
  assert.equal(body1.sandboxes.length, 5);
  assert.equal(body1.moved + body1.notMoved, 5);
  const stopped = body1.sandboxes.filter((x) => /the node was undrained/.test(x.error || ''));
  console.log(`${body1.moved} moved before the undrain took effect, ${stopped.length} not moved`);
  assert.equal(body1.moved + stopped.length, 5, JSON.stringify(body1));
  if (stopped.length > 0) assert.equal(body1.draining, false);
  assert.equal((await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n1'].draining, false);
  const map1 = await placements([etcd.client]);
  for (const x of body1.sandboxes) {
    assert.equal(map1[x.sandboxID], x.node ?? 'n1', JSON.stringify(x));
    assert.equal(x.state, 'running');
  }
  for (const m of made) m[1] = map1[m[0]] === 'n1' ? 0 : 1;
  for (const s of [a, b, pm, pf, pd]) {
    const again = await Sandbox.connect(s.sandboxId);
    assert.equal((await again.commands.run('echo here')).stdout, 'here\n');
  }
});
