// abxd --cluster (issue 43) with the official e2b JS SDK: a three-member etcd cluster and three
// abxd nodes on loopback, all started here with homes and data directories in one temporary
// directory. The SDK talks to node 1 only.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test cluster.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { clusterNode, exited, freePort, placements, sleep, spawnEtcd, startNode, stop, waitForEtcd } from './procs.mjs';

// The SDK pinned by tests/e2e/js (run.sh installs it there).
const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;
const TTL = 3; // seconds: a node that stops renewing counts as lost after this

const dir = mkdtempSync(join(tmpdir(), 'abx-cluster-'));
const etcds = []; // {name, client, peer, proc}
const nodes = []; // {name, port, home, args, proc}
const made = []; // sandbox ids
let secretFile;



// The cluster's sandbox → node map, as etcd holds it.

// A GET through node 1 routed by Host ({port}-{id}.{domain}), as a browser or curl sends it.
function getByHost(port, hostname, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { Host: hostname, ...headers } },
      (res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve({ status: res.statusCode, body }));
      });
    req.on('error', reject);
    req.end();
  });
}


before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  // Three etcd members on loopback, each with its own data directory.
  for (const name of ['e1', 'e2', 'e3'])
    etcds.push({ name, client: await freePort(), peer: await freePort() });
  const initial = etcds.map((e) => `${e.name}=http://127.0.0.1:${e.peer}`).join(',');
  for (const e of etcds) spawnEtcd(e, dir, initial);
  const endpoints = etcds.map((e) => `http://127.0.0.1:${e.client}`).join(',');
  await waitForEtcd(etcds.map((e) => e.client));
  secretFile = join(dir, 'cluster-secret');
  writeFileSync(secretFile, randomBytes(24).toString('hex'), { mode: 0o600 });
  for (const [i, name] of ['n1', 'n2', 'n3'].entries()) {
    nodes.push(await clusterNode(dir, i, name, {
      net: '10.214', endpoints, secretFile, ttl: TTL, extra: ['--cluster-capacity', '20'],
    }));
  }
  await Promise.all(nodes.map(startNode));
  const base = `http://127.0.0.1:${nodes[0].port}`;
  process.env.E2B_API_URL = base;
  process.env.E2B_SANDBOX_URL = base;
  process.env.E2B_API_KEY = readFileSync(join(nodes[0].home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  // Every sandbox goes: through node 1 where it answers, then each node stops with
  // --kill-sandboxes (node 3, killed by the test, is started again on its home first so that
  // it adopts and kills the sandboxes it left).
  const n3 = nodes[2];
  // Its old key must have expired first (a live name is refused): retried for a few TTLs.
  for (let i = 0; n3 && n3.proc && exited(n3.proc) && i < 4; i++) {
    await startNode(n3).catch(async (e) => {
      console.error(`restarting n3: ${e.message}`);
      await sleep(TTL * 1000);
    });
  }
  for (const id of made) await Sandbox.kill(id).catch(() => {});
  for (const n of nodes) await stop(n.proc, 'SIGTERM');
  for (const e of etcds) await stop(e.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

test("a node's internal header without the cluster secret is refused", async () => {
  const n2 = `http://127.0.0.1:${nodes[1].port}`;
  for (const headers of [
    { 'Abx-Cluster-Auth': 'not-the-secret', 'Abx-Cluster-Team': 'default' },
    { 'Abx-Cluster-Auth': '', 'Abx-Cluster-Team': 'default' },
    { 'Abx-Cluster-Team': 'default' },
  ]) {
    const r = await fetch(`${n2}/v2/sandboxes`, { headers });
    assert.equal(r.status, 401, JSON.stringify(headers));
  }
  const secret = readFileSync(secretFile, 'utf8');
  const ok = await fetch(`${n2}/v2/sandboxes`,
    { headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } });
  assert.equal(ok.status, 200);
});

test('three nodes on etcd: spread, relay, list, an etcd member down, a node lost', async () => {
  // Nine creates through node 1 spread over all three nodes.
  const sbxs = [];
  for (let i = 0; i < 9; i++) {
    const s = await Sandbox.create('base', { metadata: { n: String(i) } });
    made.push(s.sandboxId);
    sbxs.push(s);
  }
  const where = await placements(etcds.filter((e) => !exited(e.proc)).map((e) => e.client));
  const per = { n1: [], n2: [], n3: [] };
  for (const s of sbxs) per[where[s.sandboxId]].push(s);
  assert.deepEqual(Object.values(per).map((l) => l.length), [3, 3, 3], JSON.stringify(where));

  // Commands and files through node 1, whichever node runs the sandbox.
  await Promise.all(sbxs.map(async (s) => {
    const r = await s.commands.run(`echo hi ${s.sandboxId}`);
    assert.equal(r.stdout.trim(), `hi ${s.sandboxId}`);
    await s.files.write('/tmp/cluster.txt', `file of ${s.sandboxId}`);
    assert.equal(await s.files.read('/tmp/cluster.txt'), `file of ${s.sandboxId}`);
    const info = await Sandbox.getInfo(s.sandboxId);
    assert.equal(info.sandboxId, s.sandboxId);
    assert.equal(info.state, 'running');
  }));
  // Host routing through node 1 to a sandbox of node 3 (envd's /files): the owner checks the
  // token; without it the owner's own 401 comes back.
  const far = per.n3[1];
  const byHost = await getByHost(nodes[0].port, `49983-${far.sandboxId}.localhost`,
    '/files?path=%2Ftmp%2Fcluster.txt', { 'X-Access-Token': far.envdAccessToken });
  assert.equal(byHost.status, 200, byHost.body);
  assert.equal(byHost.body, `file of ${far.sandboxId}`);
  const noToken = await getByHost(nodes[0].port, `49983-${far.sandboxId}.localhost`,
    '/files?path=%2Ftmp%2Fcluster.txt');
  assert.equal(noToken.status, 401, noToken.body);
  // Per-sandbox control calls relayed to the owner: timeout, connect.
  const other = per.n2[1];
  await Sandbox.setTimeout(other.sandboxId, 600_000);
  const endAt = (await Sandbox.getInfo(other.sandboxId)).endAt.getTime();
  assert.ok(endAt > Date.now() + 500_000, `timeout not moved: ${endAt}`);
  const again = await Sandbox.connect(other.sandboxId);
  assert.equal((await again.commands.run('echo connected')).stdout.trim(), 'connected');
  // One list through node 1 holds every node's sandboxes.
  const listed = new Set();
  const pager = Sandbox.list();
  while (pager.hasNext) for (const item of await pager.nextItems()) listed.add(item.sandboxId);
  for (const s of sbxs) assert.ok(listed.has(s.sandboxId), `${s.sandboxId} not listed`);
  // One GET /sandboxes/metrics through node 1 answers for the sandboxes of every node (each
  // has its first sample from its create); an id no node has is left out.
  const key = { 'X-API-KEY': process.env.E2B_API_KEY };
  const ids = [...sbxs.map((s) => s.sandboxId), 'nosuchsandbox'];
  const mr = await fetch(`${process.env.E2B_API_URL}/sandboxes/metrics?sandbox_ids=${ids.join(',')}`,
    { headers: key });
  assert.equal(mr.status, 200);
  const metrics = (await mr.json()).sandboxes;
  assert.deepEqual(Object.keys(metrics).sort(), sbxs.map((s) => s.sandboxId).sort(),
    JSON.stringify(metrics));
  for (const m of Object.values(metrics)) assert.ok(m.memTotal > 0 && m.cpuCount > 0);
  // Node 2 asked with its own sandboxes and node 3's: it too merges (any node is a front door).
  const n2key = { 'X-API-KEY': readFileSync(join(nodes[1].home, 'api_key'), 'utf8').trim() };
  const pair = [per.n2[0].sandboxId, per.n3[0].sandboxId];
  const m2 = await fetch(`http://127.0.0.1:${nodes[1].port}/sandboxes/metrics?sandbox_ids=${pair}`,
    { headers: n2key });
  assert.equal(m2.status, 200);
  assert.deepEqual(Object.keys((await m2.json()).sandboxes).sort(), [...pair].sort());

  // One etcd member of three killed: creates, relays and lookups go on.
  await stop(etcds[0].proc, 'SIGKILL');
  const more = await Sandbox.create('base');
  made.push(more.sandboxId);
  assert.equal((await more.commands.run('echo after')).stdout.trim(), 'after');
  for (const s of [per.n2[0], per.n3[0]])
    assert.equal((await s.commands.run('echo still')).stdout.trim(), 'still');

  // Node 3 killed (-9): nodes 1 and 2 keep answering; node 3's sandboxes are reported lost
  // within the lease's TTL (plus one renewal period of slack).
  await stop(nodes[2].proc, 'SIGKILL');
  const killedAt = Date.now();
  const victim = per.n3[0].sandboxId;
  // Until the lease runs out node 3 still counts as a member that does not answer: 503.
  let info;
  let answers = 0;
  for (;;) {
    try {
      info = await Sandbox.getInfo(victim);
    } catch (e) {
      assert.match(e.message, /did not answer/);
      answers++;
    }
    if (info?.state === 'lost' || Date.now() - killedAt > (TTL + 3) * 1000) break;
    await sleep(200);
  }
  assert.equal(info.state, 'lost', `node 3's sandbox not reported lost: ${JSON.stringify(info)}`);
  console.log(`node 3's sandbox reported lost ${Date.now() - killedAt} ms after kill -9 ` +
    `(${answers} answers of 503 before)`);
  for (const s of [...per.n1, ...per.n2])
    assert.equal((await s.commands.run('echo alive')).stdout.trim(), 'alive');
  const states = {};
  const pager2 = Sandbox.list();
  while (pager2.hasNext)
    for (const item of await pager2.nextItems()) states[item.sandboxId] = item.state;
  for (const s of per.n3) assert.equal(states[s.sandboxId], 'lost', JSON.stringify(states));
  for (const s of [...per.n1, ...per.n2]) assert.equal(states[s.sandboxId], 'running');

  // Killing through node 1 works for the nodes that are up.
  for (const s of [...per.n1, ...per.n2]) assert.equal(await Sandbox.kill(s.sandboxId), true);
  const left = await placements(etcds.filter((e) => !exited(e.proc)).map((e) => e.client));
  for (const s of [...per.n1, ...per.n2]) assert.equal(left[s.sandboxId], undefined);
});
