// abxd --cluster drain (issue 43) with the official e2b JS SDK: one etcd member and two abxd
// nodes on loopback, each with its own home and --sandbox-net range. Sandboxes made on node 2
// move to node 1 when node 2 is drained, and go on there with the same id, token, files,
// metadata, deadline and running processes.
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
import { etcdRange, freePort, placements, sleep, startEtcd, startNode, stop, useNode } from './procs.mjs';

const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;

const dir = mkdtempSync(join(tmpdir(), 'abx-drain-'));
let etcd; // {client, peer, proc}
const nodes = []; // {name, port, home, args, proc, key, url}
const made = []; // [id, node index]



// The cluster's sandbox → node map.


// The SDK talks to node `i` with that node's API key.

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  etcd = await startEtcd(dir);
  const secretFile = join(dir, 'cluster-secret');
  writeFileSync(secretFile, randomBytes(24).toString('hex'), { mode: 0o600 });
  for (const [i, name] of ['n1', 'n2'].entries()) {
    const port = await freePort();
    const home = join(dir, name);
    mkdirSync(home);
    if (name === 'n2') {
      // A template node 1 lacks: a sandbox of it cannot move there.
      mkdirSync(join(home, 'templates', 'only2'), { recursive: true });
      writeFileSync(join(home, 'templates', 'only2', 'template.yaml'), 'id: only2\n');
    }
    nodes.push({
      name, port, home, url: `http://127.0.0.1:${port}`,
      args: ['--home', home, '--listen', `127.0.0.1:${port}`, '--dns-upstream', '127.0.0.1:9',
        '--kill-sandboxes', '--pause', 'disk', '--sandbox-net', `10.216.${i * 32}.0/19`,
        '--cluster', `http://127.0.0.1:${etcd.client}`, '--node-name', name, '--advertise-url', `http://127.0.0.1:${port}`,
        '--cluster-secret-file', secretFile, '--cluster-ttl', '5',
        '--cluster-capacity', String(10 * (i + 1))],
    });
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

test("drain: node 2's running sandboxes go on on node 1 with their ids, files and processes",
  async () => {
    // Two sandboxes placed on node 2, which has the most free slots (20 to node 1's 10).
    useNode(nodes[1]);
    const a = await Sandbox.create('base', { metadata: { who: 'a' }, timeoutMs: 600_000 });
    made.push([a.sandboxId, 0]);
    const b = await Sandbox.create('base', { metadata: { who: 'b' }, timeoutMs: 600_000 });
    made.push([b.sandboxId, 0]);
    let map = await placements([etcd.client]);
    assert.equal(map[a.sandboxId], 'n2');
    assert.equal(map[b.sandboxId], 'n2');
    const stay = await Sandbox.create('only2', { timeoutMs: 600_000 });
    made.push([stay.sandboxId, 1]);
    assert.equal((await placements([etcd.client]))[stay.sandboxId], 'n2');
    await stay.commands.run("setsid sh -c 'sleep 1000' >/dev/null 2>&1 </dev/null &");
    const stayPid = (await stay.commands.run('pgrep -x sleep')).stdout.trim();
    assert.match(stayPid, /^\d+$/);
    await a.files.write('/home/user/note.txt', 'written on node 2');
    // A counter in its own session: it outlives the command that started it.
    await a.commands.run("setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; " +
      "sleep 0.2; done' >/dev/null 2>&1 </dev/null &");
    await sleep(500);
    const pid = (await a.commands.run('pgrep -f "while true"')).stdout.trim();
    assert.match(pid, /^\d+$/);
    const before = await (await fetch(`${nodes[1].url}/sandboxes/${a.sandboxId}`,
      { headers: { 'X-API-KEY': nodes[1].key } })).json();

    // Drain node 2.
    const t0 = Date.now();
    const r = await fetch(`${nodes[1].url}/abx/cluster/drain`,
      { method: 'POST', headers: { 'X-API-KEY': nodes[1].key } });
    const body = await r.json();
    console.log(`drain of 3 sandboxes took ${Date.now() - t0} ms: ${JSON.stringify(body)}`);
    assert.equal(r.status, 200, JSON.stringify(body));
    assert.equal(body.node, 'n2');
    assert.deepEqual(body.otherTeams, { moved: 0, notMoved: 0 });
    assert.equal(body.sandboxes.length, 3);
    const moved = Object.fromEntries(body.sandboxes.map((s) => [s.sandboxID, s]));
    assert.equal(moved[a.sandboxId].node, 'n1', JSON.stringify(moved[a.sandboxId]));
    assert.equal(moved[b.sandboxId].node, 'n1', JSON.stringify(moved[b.sandboxId]));
    // The one node 1 cannot take stays on node 2, running as it was: nothing is lost.
    assert.match(moved[stay.sandboxId].error, /template 'only2' is not on this node/);
    assert.equal(moved[stay.sandboxId].node, undefined);
    map = await placements([etcd.client]);
    assert.equal(map[a.sandboxId], 'n1');
    assert.equal(map[b.sandboxId], 'n1');
    assert.equal(map[stay.sandboxId], 'n2');
    made[0][1] = 0;
    made[1][1] = 0;

    // Through node 1, with node 1's key: the same sandbox, its file, its process, its token.
    useNode(nodes[0]);
    const a1 = await Sandbox.connect(a.sandboxId);
    assert.equal(await a1.files.read('/home/user/note.txt'), 'written on node 2');
    assert.equal((await a1.commands.run('pgrep -f "while true"')).stdout.trim(), pid);
    const c1 = Number((await a1.commands.run('cat /tmp/count')).stdout.trim());
    await sleep(1000);
    const c2 = Number((await a1.commands.run('cat /tmp/count')).stdout.trim());
    assert.ok(c2 > c1, `the counter goes on (${c1} then ${c2})`);
    assert.equal((await a1.commands.run('echo moved')).stdout, 'moved\n');
    const b1 = await Sandbox.connect(b.sandboxId);
    assert.equal((await b1.commands.run('echo b')).stdout, 'b\n');
    // The one that stayed, through node 1 (relayed to node 2): its process is still there.
    const stay1 = await Sandbox.connect(stay.sandboxId);
    assert.equal((await stay1.commands.run('pgrep -x sleep')).stdout.trim(), stayPid);
    const info = await (await fetch(`${nodes[0].url}/sandboxes/${a.sandboxId}`,
      { headers: { 'X-API-KEY': nodes[0].key } })).json();
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { who: 'a' });
    assert.equal(info.envdAccessToken, before.envdAccessToken);
    assert.equal(info.endAt, before.endAt);
    // Node 2 has nothing of them left (asked directly, as a node).
    const secret = readFileSync(join(dir, 'cluster-secret'), 'utf8');
    const left = await (await fetch(`${nodes[1].url}/v2/sandboxes`, {
      headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } })).json();
    assert.deepEqual(left.map((s) => s.sandboxID), [stay.sandboxId]);
    assert.equal(left[0].state, 'running');
    for (const id of [a.sandboxId, b.sandboxId]) {
      assert.equal(existsSync(join(nodes[1].home, 'run', id)), false);
      assert.equal(existsSync(join(nodes[1].home, 'checkpoints', id)), false);
    }

    // Node 2 is draining: a create through it is placed on node 1.
    const n2 = (await etcdRange([etcd.client], '/abx/nodes/'))['/abx/nodes/n2'];
    assert.equal(n2.draining, true);
    useNode(nodes[1]);
    const c = await Sandbox.create('base', { timeoutMs: 60_000 });
    made.push([c.sandboxId, 1]);
    assert.equal((await placements([etcd.client]))[c.sandboxId], 'n1');
    await c.kill();
    made.pop();
  });
