// abx-commands without a server: how a client built from an e2b Sandbox routes its requests
// (a recording fetch stands in for the network) and how error bodies become typed errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  AbxCommands,
  CommandFailedError,
  CommandNotFoundError,
  CommandTimeoutError,
  InvalidArgumentsError,
  ServerUnavailableError,
  UnauthorizedError,
  commands,
} from '../dist/index.js';

function recorder(status, body) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url: String(url), method: init.method, headers: init.headers, body: init.body });
    return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
  };
  return { calls, fetch };
}

// The shape of an e2b Sandbox as this module reads it (the SDK's own class, minus the network).
function fakeSandbox({ sandboxUrl, debug = false, domain = 'abx.example' } = {}) {
  return {
    sandboxId: 'abcdefghij0123456789',
    envdAccessToken: 'full-token',
    connectionConfig: { sandboxUrl, debug, apiUrl: 'http://api.example', apiKey: 'e2b_k', requestTimeoutMs: 5000 },
    getHost(port) {
      return debug ? `localhost:${port}` : `${port}-${this.sandboxId}.${domain}`;
    },
  };
}

test('E2B_SANDBOX_URL set: one URL, routing headers, the access token', async () => {
  const r = recorder(200, { result: 3 });
  const c = commands(fakeSandbox({ sandboxUrl: 'http://127.0.0.1:3000/' }), { fetch: r.fetch });
  assert.equal(await c.callCommand('add', { a: 1, b: 2 }), 3);
  assert.equal(r.calls[0].url, 'http://127.0.0.1:3000/commands/add');
  assert.equal(r.calls[0].method, 'POST');
  assert.deepEqual(r.calls[0].headers, {
    'E2b-Sandbox-Id': 'abcdefghij0123456789',
    'E2b-Sandbox-Port': '49982',
    'X-Access-Token': 'full-token',
    'Content-Type': 'application/json',
  });
  assert.equal(r.calls[0].body, '{"a":1,"b":2}');
});

test('no sandbox URL: the host {port}-{id}.{domain} over https, as the SDK does', async () => {
  const saved = process.env.E2B_SANDBOX_URL;
  delete process.env.E2B_SANDBOX_URL;
  try {
    const r = recorder(200, { commands: [] });
    const c = commands(fakeSandbox({}), { fetch: r.fetch });
    assert.deepEqual(await c.listCommands(), []);
    assert.equal(r.calls[0].url, 'https://49982-abcdefghij0123456789.abx.example/commands');
    assert.deepEqual(r.calls[0].headers, { 'X-Access-Token': 'full-token' });

    const d = recorder(200, { commands: [] });
    await commands(fakeSandbox({ debug: true }), { fetch: d.fetch, port: 50000 }).listCommands();
    assert.equal(d.calls[0].url, 'http://localhost:50000/commands');
  } finally {
    if (saved !== undefined) process.env.E2B_SANDBOX_URL = saved;
  }
});

test('scopedToken posts to the control API with the API key; withToken swaps the token', async () => {
  const r = recorder(201, { token: 'abxs1.x.y', expiresAt: '2030-01-01T00:00:00.000Z' });
  const c = commands(fakeSandbox({ sandboxUrl: 'http://s' }), { fetch: r.fetch });
  const st = await c.scopedToken(['demo'], 60);
  assert.deepEqual(st, { token: 'abxs1.x.y', expiresAt: new Date('2030-01-01T00:00:00.000Z'), commands: ['demo'] });
  assert.equal(r.calls[0].url, 'http://api.example/sandboxes/abcdefghij0123456789/tokens');
  assert.equal(r.calls[0].headers['X-API-KEY'], 'e2b_k');
  assert.equal(r.calls[0].body, '{"commands":["demo"],"ttlSeconds":60}');

  const ok = recorder(200, { result: 'r' });
  const scoped = new AbxCommands({ sandboxId: 'sbx', sandboxUrl: 'http://s', fetch: ok.fetch }).withToken(st.token);
  await scoped.callCommand('demo', { x: 1 });
  assert.equal(ok.calls[0].headers['X-Access-Token'], 'abxs1.x.y');
});

test('error bodies map to typed errors', async () => {
  const call = (status, body) =>
    new AbxCommands({ sandboxId: 's', baseUrl: 'http://x', fetch: recorder(status, body).fetch }).callCommand('c', {});
  await assert.rejects(call(400, { error: "argument 'n' must be an integer, got string", type: 'InvalidArgument' }), (e) =>
    e instanceof InvalidArgumentsError && e.field === 'n' && e.code === 'InvalidArgument');
  await assert.rejects(call(404, { error: "unknown command 'c'", type: 'NotFound' }), CommandNotFoundError);
  await assert.rejects(call(401, { code: 401, message: 'invalid access token' }), (e) =>
    e instanceof UnauthorizedError && e.code === 'Unauthenticated' && e.message === 'invalid access token');
  await assert.rejects(call(403, { error: 'forbidden', type: 'PermissionDenied' }), UnauthorizedError);
  await assert.rejects(call(403, { code: 403, message: 'port 49982 of this sandbox is private' }), ServerUnavailableError);
  await assert.rejects(call(502, { code: 502, message: 'nothing listens' }), ServerUnavailableError);
  await assert.rejects(call(503, { error: 'shutting down', type: 'Unavailable' }), ServerUnavailableError);
  await assert.rejects(call(504, { error: 'call exceeded 30s', type: 'DeadlineExceeded' }), (e) =>
    e instanceof CommandTimeoutError && e.status === 504 && e.code === 'DeadlineExceeded');
  await assert.rejects(call(500, { error: 'boom', type: 'std::runtime_error' }), (e) =>
    e instanceof CommandFailedError && e.code === 'std::runtime_error' && e.message === 'boom');
});

test('a client needs a way to reach the sandbox', () => {
  const saved = process.env.E2B_SANDBOX_URL;
  delete process.env.E2B_SANDBOX_URL;
  try {
    assert.throws(() => new AbxCommands({ sandboxId: 's' }), TypeError);
  } finally {
    if (saved !== undefined) process.env.E2B_SANDBOX_URL = saved;
  }
});
