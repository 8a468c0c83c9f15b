// Process, port, etcd and node helpers shared by the cluster e2e tests (cluster, drain, fanout,
// chaos and keys .test.mjs).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { join } from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export const ETCD_BIN = process.env.ABX_ETCD_BIN || '/usr/bin/etcd';

// A loopback port free at the time of asking.
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export function exited(p) {
  return p.exitCode !== null || p.signalCode !== null;
}

// Sends `signal` and resolves once the process has exited (at once if it already had).
export function stop(p, signal) {
  if (!p || exited(p)) return Promise.resolve();
  return new Promise((resolve) => {
    p.once('exit', resolve);
    p.kill(signal);
  });
}

const b64 = (s) => Buffer.from(s).toString('base64');

// One POST over https with a client certificate (`tls`: {ca, cert, key} file paths), as abxd
// speaks to an etcd with --client-cert-auth: {status, body}.
function httpsPost(port, path, body, tls) {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({
      host: '127.0.0.1', port, path, method: 'POST', timeout: 5000,
      ca: readFileSync(tls.ca), cert: readFileSync(tls.cert), key: readFileSync(tls.key),
    }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end(JSON.stringify(body));
  });
}

// POSTs `body` to etcd's JSON gateway at `path` on the first of the client `ports` that answers
// (over https with `tls`, {ca, cert, key}, when given).
export async function etcdCall(ports, path, body, tls) {
  for (const port of ports) {
    try {
      if (tls) {
        const r = await httpsPost(port, path, body, tls);
        if (r.status === 200) return JSON.parse(r.body);
        continue;
      }
      const r = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        body: JSON.stringify(body),
      });
      if (r.ok) return r.json();
    } catch {}
  }
  throw new Error('no etcd member answered');
}

// The keys under `prefix` as {key: its JSON value}.
export async function etcdRange(ports, prefix, tls) {
  const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
  const r = await etcdCall(ports, '/v3/kv/range', { key: b64(prefix), range_end: b64(end) }, tls);
  const out = {};
  for (const kv of r.kvs || []) {
    out[Buffer.from(kv.key, 'base64').toString()] =
      JSON.parse(Buffer.from(kv.value, 'base64').toString());
  }
  return out;
}

// The cluster's sandbox map: {sandboxID: node name}.
export async function placements(ports, tls) {
  const out = {};
  for (const v of Object.values(await etcdRange(ports, '/abx/sandboxes/', tls))) out[v.sandboxID] = v.node;
  return out;
}

// Spawns etcd member `e` ({name, client, peer}) of `initialCluster` with its data in `dir`. The
// members of one cluster share a token made from `initialCluster` (its ports are this test's).
// With `tls` ({ca, cert, key}: the member's certificate and the CA its clients' must chain to)
// clients speak https and must present a certificate (--client-cert-auth); peers stay on http.
export function spawnEtcd(e, dir, initialCluster, tls) {
  const token = `abx-test-${createHash('sha256').update(initialCluster).digest('hex').slice(0, 8)}`;
  const c = `${tls ? 'https' : 'http'}://127.0.0.1:${e.client}`;
  const p = `http://127.0.0.1:${e.peer}`;
  const tlsArgs = tls ? ['--cert-file', tls.cert, '--key-file', tls.key,
    '--trusted-ca-file', tls.ca, '--client-cert-auth'] : [];
  e.proc = spawn(ETCD_BIN, ['--name', e.name, '--data-dir', join(dir, e.name),
    '--listen-client-urls', c, '--advertise-client-urls', c, '--listen-peer-urls', p,
    '--initial-advertise-peer-urls', p, '--initial-cluster', initialCluster,
    '--initial-cluster-state', 'new', '--initial-cluster-token', token, ...tlsArgs,
    '--logger', 'zap', '--log-level', 'error'], { stdio: 'ignore' });
  return e;
}

// Resolves once a put through one of `ports` succeeds (10 s at most).
export async function waitForEtcd(ports, tls) {
  for (let i = 0; ; i++) {
    try {
      await etcdCall(ports, '/v3/kv/put', { key: b64('probe'), value: b64('1') }, tls);
      return;
    } catch {}
    if (i > 100) throw new Error('etcd did not come up');
    await sleep(100);
  }
}

// A one-member etcd on free loopback ports, answering: {name, client, peer, proc}.
export async function startEtcd(dir) {
  const e = { name: 'e1', client: await freePort(), peer: await freePort() };
  spawnEtcd(e, dir, `e1=http://127.0.0.1:${e.peer}`);
  await waitForEtcd([e.client]);
  return e;
}

// Starts abxd node `n` ({name, args}) and resolves once it listens; n.proc is the process.
export function startNode(n) {
  return new Promise((resolve, reject) => {
    n.proc = spawn(process.env.ABXD_BIN, n.args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const timer = setTimeout(() => reject(new Error(`${n.name} did not start`)), 30000);
    n.proc.once('exit', (code) => reject(new Error(`${n.name} exited early: ${code}`)));
    n.proc.stdout.on('data', (d) => {
      if (/listening on /.test(d.toString())) {
        clearTimeout(timer);
        n.proc.removeAllListeners('exit');
        n.dead = false;
        resolve();
      }
    });
  });
}

// Node `name` of a test's cluster, not started (startNode): a fresh home under `dir`, a free
// loopback port, and the flags every test's node has (the test DNS upstream, --kill-sandboxes,
// its own /19 of `net`, e.g. '10.216', by its index `i`; etcd `endpoints`, the secret file and
// the TTL), then `extra`: {name, port, home, url, args}.
export async function clusterNode(dir, i, name, { net, endpoints, secretFile, ttl, extra = [] }) {
  const port = await freePort();
  const home = join(dir, name);
  mkdirSync(home);
  return {
    name, port, home, url: `http://127.0.0.1:${port}`,
    args: ['--home', home, '--listen', `127.0.0.1:${port}`, '--dns-upstream', '127.0.0.1:9',
      '--kill-sandboxes', '--sandbox-net', `${net}.${i * 32}.0/19`, '--cluster', endpoints,
      '--node-name', name, '--advertise-url', `http://127.0.0.1:${port}`,
      '--cluster-secret-file', secretFile, '--cluster-ttl', String(ttl), ...extra],
  };
}

// Points the e2b SDK (its environment) at node `n` ({url, key}).
export function useNode(n) {
  process.env.E2B_API_URL = n.url;
  process.env.E2B_SANDBOX_URL = n.url;
  process.env.E2B_API_KEY = n.key;
}
