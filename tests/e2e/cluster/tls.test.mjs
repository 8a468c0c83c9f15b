// abxd --cluster with TLS (issue 43, security): a three-member etcd cluster that speaks https
// only and wants a client certificate (--client-cert-auth), and three abxd nodes that call each
// other only over mutual TLS on their internal endpoints (--cluster-listen), every certificate
// made by scripts/cluster-certs.sh. The official e2b SDK against node 1 creates sandboxes that
// are placed on nodes 2 and 3 and runs commands and files on them through node 1 (relayed control
// calls, and sandbox traffic through the TLS tunnels). A client with no certificate, or one of
// another CA, is refused in the handshake on an internal endpoint; a node's call on the public
// listener is refused whatever secret it carries; etcd with a CA that did not sign its
// certificate, or without this node's client certificate, is a clear start-up error.
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_ETCD_BIN=/usr/bin/etcd node --test tls.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { connect as tlsConnect } from 'node:tls';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { etcdRange, freePort, placements, spawnEtcd, startNode, stop, useNode, waitForEtcd }
  from './procs.mjs';

const jsRequire = createRequire(new URL('../js/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(jsRequire.resolve('e2b')).href);

const ABXD_BIN = process.env.ABXD_BIN;
const CERTS = fileURLToPath(new URL('../../../scripts/cluster-certs.sh', import.meta.url));

const dir = mkdtempSync(join(tmpdir(), 'abx-tls-'));
const pki = join(dir, 'pki'); // the cluster CA and the nodes' certificates
const etcdPki = join(dir, 'etcd-pki'); // etcd's CA, the members' and the nodes' client certs
const roguePki = join(dir, 'rogue-pki'); // another CA: its certificates must be refused
const etcds = []; // {name, client, peer, proc}
const nodes = []; // {name, port, internal, home, args, proc, key, url}
const made = []; // sandbox ids
let etcdTls; // the test's own client certificate for etcd
let secret;

const certs = (...args) => execFileSync(CERTS, args, { stdio: ['ignore', 'ignore', 'inherit'] });
const api = (i, path, init = {}) => fetch(`${nodes[i].url}${path}`,
  { ...init, headers: { 'X-API-KEY': nodes[i].key, ...(init.headers || {}) } });

// Opens a TLS connection to node i's internal endpoint with `opts` (cert, key, ca, maxVersion),
// sends a node's call (the right secret) and resolves with what happened: whether the handshake
// completed on our side, the error if any, and every byte that came back.
function probe(i, opts) {
  return new Promise((resolve) => {
    let secured = false;
    let data = '';
    let error = null;
    const s = tlsConnect({ host: '127.0.0.1', port: nodes[i].internal, rejectUnauthorized: true,
      ca: readFileSync(join(pki, 'ca.pem')), ...opts }, () => {
      secured = true;
      s.write(`GET /sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nAbx-Cluster-Auth: ${secret}\r\n` +
        'Abx-Cluster-Team: default\r\nConnection: close\r\n\r\n');
    });
    s.setTimeout(10000, () => s.destroy(new Error('timeout')));
    s.on('data', (d) => { data += d; });
    s.on('error', (e) => { error = e; });
    s.on('close', () => resolve({ secured, error, data }));
  });
}

before(async () => {
  if (!ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  certs('ca', pki);
  certs('ca', etcdPki);
  certs('ca', roguePki);
  certs('node', etcdPki, 'member', 'IP:127.0.0.1');
  certs('node', etcdPki, 'client', 'DNS:abx-node');
  certs('node', roguePki, 'rogue', 'IP:127.0.0.1');
  for (const n of ['n1', 'n2', 'n3']) certs('node', pki, n, 'IP:127.0.0.1');
  etcdTls = { ca: join(etcdPki, 'ca.pem'), cert: join(etcdPki, 'client.pem'),
    key: join(etcdPki, 'client.key') };

  for (const name of ['e1', 'e2', 'e3']) {
    etcds.push({ name, client: await freePort(), peer: await freePort() });
  }
  const initial = etcds.map((e) => `${e.name}=http://127.0.0.1:${e.peer}`).join(',');
  const member = { ca: join(etcdPki, 'ca.pem'), cert: join(etcdPki, 'member.pem'),
    key: join(etcdPki, 'member.key') };
  for (const e of etcds) spawnEtcd(e, dir, initial, member);
  await waitForEtcd(etcds.map((e) => e.client), etcdTls);

  const secretFile = join(dir, 'cluster-secret');
  secret = randomBytes(24).toString('hex');
  writeFileSync(secretFile, secret, { mode: 0o600 });
  const endpoints = etcds.map((e) => `https://127.0.0.1:${e.client}`).join(',');
  // n1 takes no sandbox of its own (capacity 1, taken by nothing but a tie it never wins):
  // creates through it go to n2 and n3, which hold 5 each.
  const capacity = { n1: 1, n2: 5, n3: 5 };
  for (const [i, name] of ['n1', 'n2', 'n3'].entries()) {
    const port = await freePort();
    const internal = await freePort();
    const home = join(dir, name);
    mkdirSync(home);
    nodes.push({
      name, port, internal, home, url: `http://127.0.0.1:${port}`,
      args: ['--home', home, '--listen', `127.0.0.1:${port}`, '--dns-upstream', '127.0.0.1:9',
        '--kill-sandboxes', '--sandbox-net', `10.218.${i * 32}.0/19`,
        '--cluster', endpoints, '--etcd-ca', etcdTls.ca, '--etcd-cert', etcdTls.cert,
        '--etcd-key', etcdTls.key,
        '--cluster-ca', join(pki, 'ca.pem'), '--cluster-cert', join(pki, `${name}.pem`),
        '--cluster-key', join(pki, `${name}.key`), '--cluster-listen', `127.0.0.1:${internal}`,
        '--node-name', name, '--cluster-secret-file', secretFile, '--cluster-ttl', '30',
        '--cluster-capacity', String(capacity[name])],
    });
  }
  await Promise.all(nodes.map(startNode));
  for (const n of nodes) n.key = readFileSync(join(n.home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
});

after(async () => {
  useNode(nodes[0]);
  for (const id of made) await Sandbox.kill(id).catch(() => {});
  for (const n of nodes) await stop(n.proc, 'SIGTERM');
  for (const e of etcds) await stop(e.proc, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

test('sandboxes on other nodes through node 1, every node-to-node call over mutual TLS',
  async () => {
    // Each node registered its internal endpoint: the other nodes reach it there only.
    const reg = await etcdRange(etcds.map((e) => e.client), '/abx/nodes/', etcdTls);
    for (const n of nodes) {
      assert.equal(reg[`/abx/nodes/${n.name}`].apiUrl, `https://127.0.0.1:${n.internal}`,
        JSON.stringify(reg));
    }
    useNode(nodes[0]);
    const a = await Sandbox.create('base', { metadata: { who: 'tls-a' }, timeoutMs: 300_000 });
    made.push(a.sandboxId);
    const b = await Sandbox.create('base', { metadata: { who: 'tls-b' }, timeoutMs: 300_000 });
    made.push(b.sandboxId);
    const map = await placements(etcds.map((e) => e.client), etcdTls);
    assert.deepEqual([map[a.sandboxId], map[b.sandboxId]].sort(), ['n2', 'n3'], JSON.stringify(map));

    for (const s of [a, b]) {
      // Sandbox traffic (envd) through node 1's front door: a TLS tunnel to the owner.
      assert.equal((await s.commands.run('echo over-tls')).stdout, 'over-tls\n');
      await s.files.write('/tmp/tls.txt', `file of ${s.sandboxId}`);
      assert.equal(await s.files.read('/tmp/tls.txt'), `file of ${s.sandboxId}`);
      // A control call relayed over mutual TLS.
      const r = await api(0, `/sandboxes/${s.sandboxId}`);
      const info = await r.json();
      assert.equal(r.status, 200, JSON.stringify(info));
      assert.equal(info.metadata.who, s === a ? 'tls-a' : 'tls-b');
    }
    // The merged list asks n2 and n3 over mutual TLS: both answer.
    const r = await api(0, '/v2/sandboxes');
    const list = await r.json();
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('abx-cluster-missing'), null);
    assert.deepEqual(list.map((x) => x.sandboxID).sort(), [a.sandboxId, b.sandboxId].sort());

    // With its own certificate and the secret, a node's call on the internal endpoint is served
    // (the control for the refusals below: the endpoint works, and what refuses is the check).
    const owner = nodes.findIndex((n) => n.name === map[a.sandboxId]);
    const ok = await probe(owner, { cert: readFileSync(join(pki, 'n1.pem')),
      key: readFileSync(join(pki, 'n1.key')) });
    assert.equal(ok.secured, true, String(ok.error));
    assert.match(ok.data, /^HTTP\/1\.1 200 /, ok.data);
    assert.ok(ok.data.includes(a.sandboxId), ok.data);

    // Killed through node 1 (relayed), gone from the map.
    await Sandbox.kill(a.sandboxId);
    await Sandbox.kill(b.sandboxId);
    made.length = 0;
    const left = await placements(etcds.map((e) => e.client), etcdTls);
    assert.equal(left[a.sandboxId], undefined);
    assert.equal(left[b.sandboxId], undefined);
  });

test('the internal endpoint refuses a client without a certificate of the cluster CA', async () => {
  const rogue = { cert: readFileSync(join(roguePki, 'rogue.pem')),
    key: readFileSync(join(roguePki, 'rogue.key')) };
  for (const [what, opts] of [['no certificate', {}], ['another CA\'s certificate', rogue]]) {
    // TLS 1.2: the server's verdict on our certificate ends the handshake itself.
    const r12 = await probe(1, { ...opts, maxVersion: 'TLSv1.2' });
    console.log(`${what}, TLS 1.2: secured=${r12.secured} error=${r12.error?.code || r12.error}`);
    assert.equal(r12.secured, false, `${what}: the TLS 1.2 handshake completed`);
    assert.ok(r12.error, `${what}: no error`);
    assert.equal(r12.data, '', `${what}: ${r12.data}`);
    // TLS 1.3: the client finishes its side before the server checks; the server then ends the
    // connection with an alert, and no request is read or answered.
    const r13 = await probe(1, opts);
    console.log(`${what}, TLS 1.3: secured=${r13.secured} error=${r13.error?.code || r13.error}`);
    assert.equal(r13.data, '', `${what}: ${r13.data}`);
    assert.ok(r13.error, `${what}: no alert`);
  }
  // The internal endpoint with a server certificate the client does not trust: our side refuses
  // (the nodes' own check of each other, as the client).
  const wrong = await probe(1, { ca: readFileSync(join(roguePki, 'ca.pem')),
    cert: readFileSync(join(pki, 'n1.pem')), key: readFileSync(join(pki, 'n1.key')) });
  assert.equal(wrong.secured, false);

  // The public listener: a node's call (the right secret) is refused there.
  const r = await fetch(`${nodes[1].url}/sandboxes`,
    { headers: { 'Abx-Cluster-Auth': secret, 'Abx-Cluster-Team': 'default' } });
  const body = await r.text();
  assert.equal(r.status, 401, body);
  assert.match(body, /internal endpoint only/);
});

// Starts abxd with `extra` etcd flags against the TLS etcd; resolves {code, stderr} at its exit.
function failingStart(name, extra) {
  return new Promise((resolve, reject) => {
    const home = join(dir, name);
    mkdirSync(home);
    const endpoints = etcds.map((e) => `https://127.0.0.1:${e.client}`).join(',');
    const p = spawn(ABXD_BIN, ['--home', home, '--listen', '127.0.0.1:0',
      '--dns-upstream', '127.0.0.1:9', '--no-network', '--cluster', endpoints, ...extra,
      '--node-name', name, '--advertise-url', 'http://127.0.0.1:1',
      '--cluster-secret-file', join(dir, 'cluster-secret')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`${name} kept running`)); },
      30000);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, stderr }); });
  });
}

test('etcd over TLS: a wrong CA or no client certificate is a clear start-up error', async () => {
  const wrongCa = await failingStart('wrongca', ['--etcd-ca', join(roguePki, 'ca.pem'),
    '--etcd-cert', etcdTls.cert, '--etcd-key', etcdTls.key]);
  console.log(`wrong --etcd-ca: exit ${wrongCa.code}: ${wrongCa.stderr.trim()}`);
  assert.equal(wrongCa.code, 3);
  assert.match(wrongCa.stderr, new RegExp(`etcd endpoint https://127\\.0\\.0\\.1:${etcds[0].client}`));
  assert.match(wrongCa.stderr, /certificate did not verify/);

  const noCert = await failingStart('nocert', ['--etcd-ca', etcdTls.ca]);
  console.log(`no --etcd-cert: exit ${noCert.code}: ${noCert.stderr.trim()}`);
  assert.equal(noCert.code, 3);
  assert.match(noCert.stderr, /127\.0\.0\.1:\d+: .*(certificate|alert|reset|closed)/i);

  // A key others can read is refused before anything starts.
  const loose = join(dir, 'loose.key');
  writeFileSync(loose, readFileSync(etcdTls.key), { mode: 0o644 });
  const looseKey = await failingStart('loose', ['--etcd-ca', etcdTls.ca, '--etcd-cert',
    etcdTls.cert, '--etcd-key', loose]);
  assert.equal(looseKey.code, 2, looseKey.stderr);
  assert.match(looseKey.stderr, /--etcd-key .*group or others/);
});
