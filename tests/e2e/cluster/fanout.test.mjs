// abxd --cluster (issue 43): calls that ask every node, and relays after a move. One etcd member
// and three abxd nodes on loopback. A node stopped with SIGSTOP (hung: its lease still valid, its
// listener still accepting) holds a merged list only for the fan-out deadline, and the answer
// names it (Abx-Cluster-Missing). A front door that cached a sandbox's node reaches its new owner
// after a drain moved it.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test fanout.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { clusterNode, exited, placements, startEtcd, startNode, stop, useNode } from './procs.mjs';

const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;
const FANOUT_MS = 1500;

const dir = mkdtempSync(join(tmpdir(), 'abx-fanout-'));
let etcd; // {client, peer, proc}
const nodes = []; // {name, port, home, args, proc, key, url}
const made = []; // [id, node index]




const api = (i, path, init = {}) => fetch(`${nodes[i].url}${path}`,
  { ...init, headers: { 'X-API-KEY': nodes[i].key, ...(init.headers || {}) } });

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  etcd = await startEtcd(dir);
  const secretFile = join(dir, 'cluster-secret');
  writeFileSync(secretFile, randomBytes(24).toString('hex'), { mode: 0o600 });
  // Capacities make placement predictable: a create goes to n2 (30 free), a drain of n2 to n3
  // (20 free, n1 has 10).
  const capacity = { n1: 10, n2: 30, n3: 20 };
  for (const [i, name] of ['n1', 'n2', 'n3'].entries()) {
    nodes.push(await clusterNode(dir, i, name, {
      net: '10.217', endpoints: `http://127.0.0.1:${etcd.client}`, secretFile, ttl: 60,
      extra: ['--pause', 'disk', '--cluster-capacity', String(capacity[name]),
        '--cluster-fanout-timeout-ms', String(FANOUT_MS)],
    }));
  }
  await Promise.all(nodes.map(startNode));
  for (const n of nodes) n.key = readFileSync(join(n.home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  for (const n of nodes) if (n.proc && !exited(n.proc)) n.proc.kill('SIGCONT');
  for (const [id, i] of made) {
    useNode(nodes[i]);
    await Sandbox.kill(id).catch(() => {});
  }
  for (const n of nodes) await stop(n.proc, 'SIGTERM');
  await stop(etcd?.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

test('a relay after a drain reaches the new owner; a hung node holds a list only briefly',
  async () => {
    // Placed on n2 through n1; n1 reads (and caches) its placement on the first relayed call.
    useNode(nodes[0]);
    const s = await Sandbox.create('base', { metadata: { who: 'fanout' }, timeoutMs: 600_000 });
    made.push([s.sandboxId, 0]);
    assert.equal((await placements([etcd.client]))[s.sandboxId], 'n2');
    assert.equal((await s.commands.run('echo on-n2')).stdout, 'on-n2\n');
    let r = await api(0, `/sandboxes/${s.sandboxId}`);
    assert.equal(r.status, 200);
    const before = await r.json();

    // n2 drains: the sandbox moves to n3.
    r = await api(1, '/abx/cluster/drain', { method: 'POST' });
    const drained = await r.json();
    assert.equal(r.status, 200, JSON.stringify(drained));
    assert.equal(drained.sandboxes[0].node, 'n3', JSON.stringify(drained));
    assert.equal((await placements([etcd.client]))[s.sandboxId], 'n3');

    // n1 still has n2 cached: n2 answers 421, n1 reads the map again and relays to n3.
    r = await api(0, `/sandboxes/${s.sandboxId}`);
    const info = await r.json();
    assert.equal(r.status, 200, JSON.stringify(info));
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { who: 'fanout' });
    assert.equal(info.envdAccessToken, before.envdAccessToken);
    r = await api(0, `/sandboxes/${s.sandboxId}/timeout`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ timeout: 900 }),
    });
    assert.equal(r.status, 204, await r.text());
    const s1 = await Sandbox.connect(s.sandboxId);
    assert.equal((await s1.commands.run('echo on-n3')).stdout, 'on-n3\n');
    // n2 itself, asked as a node for what it no longer holds, says so (421), not 404.
    const secret = readFileSync(join(dir, 'cluster-secret'), 'utf8');
    r = await fetch(`${nodes[1].url}/sandboxes/${s.sandboxId}`,
      { headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } });
    assert.equal(r.status, 421);
    assert.equal(r.headers.get('abx-cluster-not-owner'), '1');

    // Every node answers: no Abx-Cluster-Missing.
    r = await api(0, '/v2/sandboxes');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('abx-cluster-missing'), null);

    // n2 hangs (SIGSTOP): its lease stays valid for 60 s, its listener accepts and never answers.
    nodes[1].proc.kill('SIGSTOP');
    try {
      for (const path of ['/v2/sandboxes', '/sandboxes',
        `/sandboxes/metrics?sandbox_ids=${s.sandboxId}`]) {
        const t0 = Date.now();
        r = await api(0, path);
        const ms = Date.now() - t0;
        const body = await r.json();
        console.log(`${path} through n1 with n2 stopped: ${r.status} in ${ms} ms, ` +
          `Abx-Cluster-Missing: ${r.headers.get('abx-cluster-missing')}`);
        assert.equal(r.status, 200, JSON.stringify(body));
        assert.equal(r.headers.get('abx-cluster-missing'), 'n2');
        assert.ok(ms >= FANOUT_MS - 100 && ms < FANOUT_MS + 3000, `answered in ${ms} ms`);
        if (path.includes('metrics')) {
          assert.ok(s.sandboxId in body.sandboxes, JSON.stringify(body));
        } else {
          assert.deepEqual(body.map((x) => x.sandboxID), [s.sandboxId]);
        }
      }
      // The SDK's list parses that answer.
      const t0 = Date.now();
      const listed = await Sandbox.list().nextItems();
      assert.deepEqual(listed.map((x) => x.sandboxId), [s.sandboxId]);
      assert.ok(Date.now() - t0 < FANOUT_MS + 3000);
    } finally {
      nodes[1].proc.kill('SIGCONT');
    }
    // Back: every node answers again.
    r = await api(0, '/v2/sandboxes');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('abx-cluster-missing'), null);

    await s1.kill();
    made.pop();
    // Killed through n1 (relayed to n3): gone from the map, and n1 does not find it.
    assert.equal((await placements([etcd.client]))[s.sandboxId], undefined);
    r = await api(0, `/sandboxes/${s.sandboxId}`);
    assert.equal(r.status, 404);
  });
