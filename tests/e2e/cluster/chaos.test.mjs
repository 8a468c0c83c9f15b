// abxd --cluster chaos (issue 43): one etcd member and four abxd nodes on loopback. For a bounded
// time, with a fixed seed, steps chosen at random: create through a random live node, kill a
// sandbox, pause one, drain a node, kill -9 a node (between steps, never during one). Then the
// invariants: every acknowledged sandbox that was not killed is running (a command answers),
// paused, or reported lost with a reason (its node was killed); a killed one is not found;
// after the killed nodes start again, no node has a sandbox the cluster does not map to it,
// nor a sandbox directory of one it does not run.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test chaos.test.mjs
//   ABX_CHAOS_SEED=7 ABX_CHAOS_SECONDS=60 (defaults 43 and 45)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync }
  from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { clusterNode, exited, placements, sleep, startEtcd, startNode, stop } from './procs.mjs';

const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;
const SEED = Number(process.env.ABX_CHAOS_SEED || 43);
const SECONDS = Number(process.env.ABX_CHAOS_SECONDS || 45);
const TTL = 3;

const dir = mkdtempSync(join(tmpdir(), 'abx-chaos-'));
let etcd;
let secret;
const nodes = []; // {name, port, home, args, proc, key, url, dead, draining}
// Every sandbox a create acknowledged: id -> {state: 'running'|'paused'|'killed', node}
const acked = new Map();

// mulberry32: a small PRNG, so a seed gives the same sequence of choices.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = prng(SEED);
const pick = (xs) => xs[Math.floor(rand() * xs.length)];



const api = (n, path, init = {}) => fetch(`${n.url}${path}`,
  { ...init, headers: { 'X-API-KEY': n.key, ...(init.headers || {}) } });
// What a node itself holds (asked as a node: it answers for itself only).
const own = async (n) => (await (await fetch(`${n.url}/v2/sandboxes`, {
  headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } })).json());

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  etcd = await startEtcd(dir);
  const secretFile = join(dir, 'cluster-secret');
  secret = randomBytes(24).toString('hex');
  writeFileSync(secretFile, secret, { mode: 0o600 });
  for (const [i, name] of ['n1', 'n2', 'n3', 'n4'].entries()) {
    const n = await clusterNode(dir, i, name, {
      net: '10.218', endpoints: `http://127.0.0.1:${etcd.client}`, secretFile, ttl: TTL,
      extra: ['--pause', 'disk', '--cluster-capacity', '50'],
    });
    nodes.push({ ...n, dead: false, draining: false });
  }
  await Promise.all(nodes.map(startNode));
  for (const n of nodes) n.key = readFileSync(join(n.home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  // Every node up (a killed one adopts what it left), then each kills what it holds.
  for (const n of nodes) if (n.dead || !n.proc || exited(n.proc)) await startNode(n).catch(() => {});
  for (const n of nodes) {
    for (const s of await own(n).catch(() => [])) {
      await api(n, `/sandboxes/${s.sandboxID}`, { method: 'DELETE' }).catch(() => {});
    }
  }
  for (const n of nodes) await stop(n.proc, 'SIGTERM');
  await stop(etcd?.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

test(`chaos: create, kill, pause, drain and kill -9 nodes (seed ${SEED})`, async () => {
  const live = () => nodes.filter((n) => !n.dead);
  const placeable = () => live().filter((n) => !n.draining);
  const of = (state) => [...acked].filter(([, v]) => v.state === state).map(([id]) => id);
  const log = [];
  const t0 = Date.now();
  let lastKill = 0;
  // Nodes get sandboxes before the first drain or kill, and at most this many live at once.
  const MAX_LIVE = 24;
  for (let step = 0; Date.now() - t0 < SECONDS * 1000; step++) {
    const r = rand();
    const front = pick(live());
    const alive = of('running').length + of('paused').length;
    if ((r < 0.5 || acked.size === 0) && alive < MAX_LIVE) {
      const res = await api(front, '/sandboxes', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ templateID: 'base', timeout: 900 }),
      });
      const body = await res.json();
      // Only an acknowledged create counts; a refused one (no node has a slot) is not a sandbox.
      if (res.status === 201) {
        acked.set(body.sandboxID, { state: 'running' });
        log.push(`create via ${front.name}: ${body.sandboxID}`);
      } else {
        log.push(`create via ${front.name}: ${res.status} ${JSON.stringify(body)}`);
      }
    } else if ((r < 0.6 || alive >= MAX_LIVE) && alive > 0) {
      const id = pick([...of('running'), ...of('paused')]);
      const res = await api(front, `/sandboxes/${id}`, { method: 'DELETE' });
      log.push(`kill ${id} via ${front.name}: ${res.status}`);
      // A sandbox of a killed node answers 503 (lost): it stays as it was.
      if (res.status === 204) acked.get(id).state = 'killed';
      else assert.ok([503].includes(res.status), `kill ${id}: ${res.status} ${await res.text()}`);
    } else if (r < 0.7 && of('running').length > 0) {
      const id = pick(of('running'));
      const res = await api(front, `/sandboxes/${id}/pause`, { method: 'POST' });
      log.push(`pause ${id} via ${front.name}: ${res.status}`);
      if (res.status === 204) acked.get(id).state = 'paused';
      else assert.ok([503].includes(res.status), `pause ${id}: ${res.status} ${await res.text()}`);
    } else if (r < 0.85 && step >= 10 && placeable().length >= 3) {
      const n = pick(placeable());
      const res = await api(n, '/abx/cluster/drain', { method: 'POST' });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      n.draining = true;
      log.push(`drain ${n.name}: ${JSON.stringify(body.sandboxes)}`);
    } else if (r >= 0.85 && step >= 10 && Date.now() - lastKill > 10000) {
      // kill -9 a node, as long as two live nodes that take sandboxes remain.
      const candidates = live().filter((n) => placeable().filter((x) => x !== n).length >= 2);
      if (candidates.length === 0) continue;
      const n = pick(candidates);
      await stop(n.proc, 'SIGKILL');
      n.dead = true;
      lastKill = Date.now();
      log.push(`kill -9 ${n.name}`);
    }
  }
  console.log(`seed ${SEED}, ${log.length} steps in ${Date.now() - t0} ms:\n  ${log.join('\n  ')}`);

  // The leases of killed nodes run out: their sandboxes are reported lost.
  const wait = lastKill + (TTL + 3) * 1000 - Date.now();
  if (wait > 0) await sleep(wait);
  const front = live()[0];
  process.env.E2B_API_URL = front.url;
  process.env.E2B_SANDBOX_URL = front.url;
  process.env.E2B_API_KEY = front.key;
  const map = await placements([etcd.client]);
  const deadNames = new Set(nodes.filter((n) => n.dead).map((n) => n.name));
  const counts = { running: 0, paused: 0, lost: 0, killed: 0 };
  for (const [id, want] of acked) {
    const res = await api(front, `/sandboxes/${id}`);
    const body = await res.json().catch(() => ({}));
    if (want.state === 'killed') {
      assert.equal(res.status, 404, `${id} was killed: ${res.status} ${JSON.stringify(body)}`);
      assert.equal(map[id], undefined, `${id} was killed but is still mapped`);
      counts.killed++;
      continue;
    }
    assert.equal(res.status, 200, `${id} (${want.state}): ${res.status} ${JSON.stringify(body)}`);
    if (deadNames.has(map[id])) {
      assert.equal(body.state, 'lost', `${id} on killed ${map[id]}: ${JSON.stringify(body)}`);
      assert.match(body.abxLostReason, /left the cluster/);
      counts.lost++;
      continue;
    }
    assert.equal(body.state, want.state, `${id}: ${JSON.stringify(body)}`);
    counts[want.state]++;
    if (want.state === 'running') {
      const s = await Sandbox.connect(id);
      assert.equal((await s.commands.run(`echo ${id}`)).stdout, `${id}\n`);
    }
  }
  console.log(`invariants hold for ${acked.size} acknowledged sandboxes: ${JSON.stringify(counts)}`);

  // No orphans: every node (the killed ones started again on their homes) holds only sandboxes
  // the cluster maps to it, and has no sandbox directory of one it does not hold.
  for (const n of nodes) if (n.dead) await startNode(n);
  await sleep(1000);
  const map2 = await placements([etcd.client]);
  for (const n of nodes) {
    const held = await own(n);
    for (const s of held) {
      assert.ok(acked.has(s.sandboxID), `${n.name} holds ${s.sandboxID}, never acknowledged`);
      assert.notEqual(acked.get(s.sandboxID).state, 'killed',
        `${n.name} holds ${s.sandboxID}, which was killed`);
      assert.equal(map2[s.sandboxID], n.name, `${n.name} holds ${s.sandboxID}, mapped to ` +
        `${map2[s.sandboxID]}`);
    }
    const ids = new Set(held.map((s) => s.sandboxID));
    for (const sub of ['sandboxes', 'run']) {
      const d = join(n.home, sub);
      if (!existsSync(d)) continue;
      for (const id of readdirSync(d)) {
        if (!acked.has(id)) continue; // not a sandbox's directory
        assert.ok(ids.has(id), `${n.name} has ${sub}/${id} but does not hold it`);
      }
    }
  }
});
