// abxd --cluster (issue 43): API keys shared between the nodes through etcd (docs/cluster.md,
// "Keys and teams"). One etcd member and two abxd nodes on loopback, renewing every second
// (--cluster-ttl 3). Each node's first-start key works on the other; a team and a key of it made
// on node 2 by `abxd teams create` / `abxd keys create` while both run work on node 1 too (for
// that team: a sandbox the key creates through node 1 is listed by the team's key through node 2
// and not by the default team's); revoked on node 1, the key stops working on node 2; etcd holds
// the keys' digests, never a key.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test keys.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clusterNode, etcdRange, exited, sleep, startEtcd, startNode, stop } from './procs.mjs';

const ABXD_BIN = process.env.ABXD_BIN;
const dir = mkdtempSync(join(tmpdir(), 'abx-keys-'));
let etcd; // {client, peer, proc}
const nodes = []; // {name, port, home, args, proc, key, url}
const made = []; // [id, key]

// GET `path` on node `i` with API key `key`: its status.
const status = async (i, path, key) =>
  (await fetch(`${nodes[i].url}${path}`, { headers: { 'X-API-KEY': key } })).status;
// Polls `pred` for up to 15 s (a few renewals of both nodes).
async function until(what, pred) {
  for (let i = 0; i < 150; i++) {
    if (await pred()) return;
    await sleep(100);
  }
  assert.fail(`not within 15 s: ${what}`);
}
// `abxd --home <home> <args>` (the key subcommands, on a running node's store): its stdout.
const abxd = (home, args) => execFileSync(ABXD_BIN, ['--home', home, ...args], { encoding: 'utf8' });

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  etcd = await startEtcd(dir);
  const secretFile = join(dir, 'cluster-secret');
  writeFileSync(secretFile, randomBytes(24).toString('hex'), { mode: 0o600 });
  for (const [i, name] of ['n1', 'n2'].entries()) {
    nodes.push(await clusterNode(dir, i, name, {
      net: '10.219', endpoints: `http://127.0.0.1:${etcd.client}`, secretFile, ttl: 3,
    }));
  }
  await Promise.all(nodes.map(startNode));
  for (const n of nodes) n.key = readFileSync(join(n.home, 'api_key'), 'utf8').trim();
});

after(async () => {
  for (const [id, key] of made) {
    await fetch(`${nodes[0].url}/sandboxes/${id}`, { method: 'DELETE', headers: { 'X-API-KEY': key } })
      .catch(() => {});
  }
  for (const n of nodes) if (n.proc && !exited(n.proc)) await stop(n.proc, 'SIGTERM');
  await stop(etcd?.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

test('a key made on one node works on every node, for its team; a revocation reaches them all',
  async () => {
    // The first-start keys.
    await until("node 1's key on node 2", async () => (await status(1, '/v2/sandboxes', nodes[0].key)) === 200);
    await until("node 2's key on node 1", async () => (await status(0, '/v2/sandboxes', nodes[1].key)) === 200);

    // A team and a key of it, made on node 2's store while it runs.
    abxd(nodes[1].home, ['teams', 'create', 'acme']);
    const acme = abxd(nodes[1].home, ['keys', 'create', '--name', 'ci', '--team', 'acme']).trim();
    assert.match(acme, /^e2b_[0-9a-f]{40}$/);
    assert.equal(await status(1, '/v2/sandboxes', acme), 200);
    await until("acme's key on node 1", async () => (await status(0, '/v2/sandboxes', acme)) === 200);

    // It acts for acme on node 1: what it creates there is acme's, wherever it is listed.
    const r = await fetch(`${nodes[0].url}/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-KEY': acme, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', timeout: 120 }),
    });
    const body = await r.json();
    assert.equal(r.status, 201, JSON.stringify(body));
    made.push([body.sandboxID, acme]);
    const list = async (key) => (await (await fetch(`${nodes[1].url}/v2/sandboxes`,
      { headers: { 'X-API-KEY': key } })).json()).map((s) => s.sandboxID);
    assert.ok((await list(acme)).includes(body.sandboxID), 'acme lists its sandbox through node 2');
    assert.ok(!(await list(nodes[1].key)).includes(body.sandboxID), 'the default team does not');
    const del = await fetch(`${nodes[1].url}/sandboxes/${body.sandboxID}`,
      { method: 'DELETE', headers: { 'X-API-KEY': acme } });
    assert.equal(del.status, 204);
    made.pop();

    // etcd holds every key's digest, never a key.
    const records = await etcdRange([etcd.client], '/abx/keys/');
    const digest = createHash('sha256').update(acme).digest('hex');
    const mine = Object.values(records).filter((k) => k.digest === digest);
    assert.equal(mine.length, 1, JSON.stringify(records));
    assert.equal(mine[0].team, 'acme');
    assert.equal(mine[0].revoked, false);
    const raw = JSON.stringify(records);
    for (const k of [acme, nodes[0].key, nodes[1].key]) assert.ok(!raw.includes(k.slice(4)), 'a key in etcd');
    assert.equal(Object.keys(records).length, 3, JSON.stringify(records));

    // Revoked on node 1, where it was taken from etcd: it stops working on node 2 as well, and
    // the record says revoked.
    abxd(nodes[0].home, ['keys', 'revoke', acme]);
    assert.equal(await status(0, '/v2/sandboxes', acme), 401);
    await until("acme's key refused on node 2", async () => (await status(1, '/v2/sandboxes', acme)) === 401);
    const after = await etcdRange([etcd.client], '/abx/keys/');
    assert.equal(Object.values(after).find((k) => k.digest === digest).revoked, true);
    // The other keys still work on both nodes.
    assert.equal(await status(0, '/v2/sandboxes', nodes[1].key), 200);
    assert.equal(await status(1, '/v2/sandboxes', nodes[0].key), 200);
  });
