// abx-server's /mcp driven by the official MCP TypeScript SDK (Client +
// StreamableHTTPClientTransport): connect and negotiate, list tools and check every schema
// against GET /commands, call tools with good and bad arguments, a throwing tool, a deadline,
// annotations from ABX_HINTS in a dlopen'd module, scoped tokens, sessions and Origin; and the
// same server over stdio (`abx-server --stdio`, StdioClientTransport).
//
// Env (set by ctest): ABX_SERVER_BIN, ABX_DEMO_MODULE, ABX_HINTED_MODULE.
import { spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startAbxServer } from './abx-server.mjs';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, ListResourcesResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

const TOKEN = 'e2e-' + randomBytes(16).toString('hex');
const CALL_TIMEOUT_MS = 1500;

for (const v of ['ABX_SERVER_BIN', 'ABX_DEMO_MODULE', 'ABX_HINTED_MODULE']) {
  if (!process.env[v]) throw new Error(`${v} is not set (run through ctest)`);
}

let server;
let base;

function startServer() {
  return startAbxServer([
    '--module', process.env.ABX_DEMO_MODULE,
    '--module', process.env.ABX_HINTED_MODULE,
    '--call-timeout', `${CALL_TIMEOUT_MS}ms`, '--log-level', 'warn',
  ], TOKEN);
}

// The documented scoped-token format (docs/command-server.md), minted as the platform would.
function mintScoped(commands, expiresAt = Math.floor(Date.now() / 1000) + 3600, key = TOKEN) {
  const claims = Buffer.from(JSON.stringify({ cmd: commands, exp: expiresAt })).toString('base64url');
  const signed = 'abxs1.' + claims;
  return signed + '.' + createHmac('sha256', key).update(signed).digest('base64url');
}

async function connect(token = TOKEN) {
  const client = new Client({ name: 'abx-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers: { 'X-Access-Token': token } },
  });
  await client.connect(transport);
  return { client, transport };
}

async function rest(name, args, token = TOKEN) {
  const r = await fetch(new URL(`/commands/${name}`, base), {
    method: 'POST',
    headers: { 'X-Access-Token': token, 'Content-Type': 'application/json' },
    body: JSON.stringify(args),
  });
  return { status: r.status, body: await r.json() };
}

async function expectMcpError(promise, code, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof McpError, `expected McpError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (pattern) assert.match(e.message, pattern);
    return true;
  });
}

before(async () => {
  ({ child: server, base } = await startServer());
});

after(() => {
  server?.removeAllListeners('exit');
  server?.kill('SIGTERM');
});

describe('abx-server /mcp with the MCP TypeScript SDK', () => {
  let client;
  let transport;
  let tools;

  before(async () => {
    ({ client, transport } = await connect());
    tools = (await client.listTools()).tools;
  });
  after(async () => {
    await client?.close();
  });

  test('connects, negotiates a supported version and opens a session', async () => {
    assert.equal(client.getServerVersion().name, 'abx-server');
    assert.ok(client.getServerCapabilities().tools, 'tools capability');
    // The SDK offers a newer revision than ours; the server answers with its own, which the
    // SDK accepts and then sends on every request.
    assert.equal(transport.protocolVersion, '2025-06-18');
    assert.match(transport.sessionId, /^[0-9a-f]{32}$/);
    assert.deepEqual(await client.ping(), {});
  });

  test('tools/list mirrors GET /commands, schema by schema', async () => {
    const r = await fetch(new URL('/commands', base), { headers: { 'X-Access-Token': TOKEN } });
    const { commands } = await r.json();
    assert.deepEqual(tools.map((t) => t.name), commands.map((c) => c.name));
    const typeOf = { string: 'string', integer: 'integer', float: 'number', boolean: 'boolean' };
    for (const cmd of commands) {
      const tool = tools.find((t) => t.name === cmd.name);
      assert.equal(tool.description, cmd.description, cmd.name);
      const s = tool.inputSchema;
      assert.equal(s.type, 'object', cmd.name);
      assert.equal(s.additionalProperties, false, cmd.name);
      assert.deepEqual(Object.keys(s.properties), cmd.args.map((a) => a.name), cmd.name);
      assert.deepEqual(s.required, cmd.args.filter((a) => a.required).map((a) => a.name));
      for (const a of cmd.args) {
        const p = s.properties[a.name];
        assert.equal(p.type, typeOf[a.type], `${cmd.name}.${a.name}`);
        if (a.default === null) assert.equal(p.default, undefined);
        else assert.deepEqual(p.default, a.default, `${cmd.name}.${a.name}`);
      }
      assert.deepEqual(tool.outputSchema, {
        type: 'object', properties: { result: {} }, required: ['result'],
      });
    }
  });

  test('integer ranges come from the C++ parameter types', () => {
    const demo = tools.find((t) => t.name === 'demo').inputSchema.properties;
    assert.deepEqual(demo.x, { type: 'integer', minimum: -2147483648, maximum: 2147483647 });
    assert.deepEqual(demo.y, { type: 'string', default: 'hello' });
    // int64 bounds are left out (JSON numbers cannot carry them exactly).
    const add = tools.find((t) => t.name === 'add').inputSchema.properties;
    assert.deepEqual(add.a, { type: 'integer' });
  });

  test('ABX_HINTS become annotations; commands without hints have none', () => {
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(byName.lookup.annotations, { readOnlyHint: true, idempotentHint: true });
    assert.deepEqual(byName.wipe.annotations, {
      readOnlyHint: false, destructiveHint: true, idempotentHint: true,
    });
    assert.equal(byName.demo.annotations, undefined);
  });

  test('tools/call returns the same result as POST /commands/{name}', async () => {
    const calls = [
      ['demo', { x: 42, y: 'world' }],
      ['demo', { x: 7 }],
      ['add', { a: 2, b: 40 }],
      ['scale', { value: 2 }],
      ['is_even', { n: 10 }],
      ['word_lengths', { text: 'ab cde' }],
      ['repeat', { word: 'hi', times: 2, upper: true }],
      ['noop', {}],
      ['lookup', { key: 'k' }],
    ];
    for (const [name, args] of calls) {
      const res = await client.callTool({ name, arguments: args });
      const expected = await rest(name, args);
      assert.equal(expected.status, 200, name);
      assert.equal(res.isError, false, name);
      assert.deepEqual(res.structuredContent, expected.body, name);
      assert.equal(res.content.length, 1, name);
      assert.equal(res.content[0].type, 'text', name);
      assert.deepEqual(JSON.parse(res.content[0].text), expected.body, name);
    }
  });

  test('a command that throws is a tool result with isError', async () => {
    const res = await client.callTool({ name: 'divide', arguments: { a: 1, b: 0 } });
    assert.equal(res.isError, true);
    assert.equal(res.content[0].type, 'text');
    assert.match(res.content[0].text, /division by zero/);
    assert.match(res.content[0].text, /std::domain_error/);
    assert.equal(res.structuredContent, undefined);
    const ok = await client.callTool({ name: 'divide', arguments: { a: 1, b: 4 } });
    assert.deepEqual(ok.structuredContent, { result: 0.25 });
  });

  test('a call past --call-timeout is a tool result with isError', async () => {
    const res = await client.callTool({ name: 'sleep_ms', arguments: { ms: CALL_TIMEOUT_MS + 1500 } });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /did not finish within/);
  });

  test('bad arguments and unknown tools are JSON-RPC invalid params', async () => {
    const bad = [
      [{ x: '42' }, /'x'/],
      [{ x: 1.5 }, /'x'/],
      [{ x: 2147483648 }, /'x'/],
      [{ x: true }, /'x'/],
      [{}, /'x'/],
      [{ x: 1, z: 2 }, /'z'/],
      [{ x: 1, y: null }, /'y'/],
    ];
    for (const [args, pattern] of bad) {
      await expectMcpError(client.callTool({ name: 'demo', arguments: args }),
        ErrorCode.InvalidParams, pattern);
    }
    await expectMcpError(client.callTool({ name: 'nope', arguments: {} }), ErrorCode.InvalidParams,
      /unknown tool 'nope'/);
  });

  test('methods the server does not offer are method-not-found', async () => {
    await expectMcpError(
      client.request({ method: 'resources/list', params: {} }, ListResourcesResultSchema),
      ErrorCode.MethodNotFound);
  });
});

describe('auth, scoped tokens, sessions and origins', () => {
  test('a scoped token lists and calls only its commands', async () => {
    const { client } = await connect(mintScoped(['demo', 'lookup']));
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['demo', 'lookup']);
    const res = await client.callTool({ name: 'demo', arguments: { x: 1 } });
    assert.deepEqual(res.structuredContent, { result: '1: hello' });
    // Out of scope reads exactly like absent.
    await expectMcpError(client.callTool({ name: 'divide', arguments: { a: 1, b: 1 } }),
      ErrorCode.InvalidParams, /unknown tool 'divide'/);
    await client.close();
  });

  test('a wrong, expired or foreign token cannot connect', async () => {
    const expired = mintScoped(['demo'], Math.floor(Date.now() / 1000) - 10);
    const foreign = mintScoped(['demo'], undefined, 'another-sandbox-token');
    for (const [token, why] of [['wrong', /invalid access token/], [expired, /expired/],
      [foreign, /bad signature/]]) {
      await assert.rejects(connect(token), (e) => {
        assert.equal(e.code, 401, String(e));  // StreamableHTTPError carries the HTTP status
        assert.match(e.message, why);
        return true;
      });
    }
  });

  test('sessions end with DELETE and are required afterwards', async () => {
    const { client, transport } = await connect();
    const sid = transport.sessionId;
    const post = (headers) => fetch(new URL('/mcp', base), {
      method: 'POST',
      headers: {
        'X-Access-Token': TOKEN, 'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream', ...headers,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    assert.equal((await post({ 'Mcp-Session-Id': sid })).status, 200);
    assert.equal((await post({})).status, 400);
    await transport.terminateSession();
    const gone = await post({ 'Mcp-Session-Id': sid });
    assert.equal(gone.status, 404);
    assert.equal((await gone.json()).error.code, -32001);
    await client.close();
  });

  test('a foreign Origin is refused, a loopback one is not', async () => {
    const init = (origin) => fetch(new URL('/mcp', base), {
      method: 'POST',
      headers: { 'X-Access-Token': TOKEN, 'Content-Type': 'application/json', Origin: origin },
      body: JSON.stringify({
        jsonrpc: '2.0', id: 1, method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'o', version: '1' } },
      }),
    });
    assert.equal((await init('http://evil.example')).status, 403);
    assert.equal((await init('http://localhost:5173')).status, 200);
  });

  test('GET /mcp offers no SSE stream', async () => {
    const r = await fetch(new URL('/mcp', base), {
      headers: { 'X-Access-Token': TOKEN, Accept: 'text/event-stream' },
    });
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST, DELETE');
  });
});

describe('abx-server --stdio with the MCP TypeScript SDK', () => {
  test('the same tools and results over stdio as over HTTP', async () => {
    const transport = new StdioClientTransport({
      command: process.env.ABX_SERVER_BIN,
      args: [
        '--stdio', '--module', process.env.ABX_DEMO_MODULE,
        '--module', process.env.ABX_HINTED_MODULE, '--call-timeout', `${CALL_TIMEOUT_MS}ms`,
      ],
      stderr: 'inherit',
    });
    const client = new Client({ name: 'abx-e2e-stdio', version: '1.0.0' });
    await client.connect(transport);
    assert.equal(client.getServerVersion().name, 'abx-server');

    const { client: http } = await connect();
    const viaHttp = (await http.listTools()).tools;
    await http.close();
    assert.deepEqual((await client.listTools()).tools, viaHttp);

    const res = await client.callTool({ name: 'demo', arguments: { x: 42, y: 'world' } });
    assert.deepEqual(res.structuredContent, { result: '42: world' });
    const err = await client.callTool({ name: 'divide', arguments: { a: 1, b: 0 } });
    assert.equal(err.isError, true);
    assert.match(err.content[0].text, /division by zero/);
    await expectMcpError(client.callTool({ name: 'demo', arguments: { x: 'no' } }),
      ErrorCode.InvalidParams, /'x'/);
    // Calls in flight together on the one session all come back.
    const many = await Promise.all([1, 2, 3, 4].map((i) =>
      client.callTool({ name: 'add', arguments: { a: i, b: 10 } })));
    assert.deepEqual(many.map((r) => r.structuredContent.result), [11, 12, 13, 14]);
    await client.close();
  });

  test('abx-server --stdio answers, then exits 0 at end of input', async () => {
    const child = spawn(process.env.ABX_SERVER_BIN,
      ['--stdio', '--module', process.env.ABX_DEMO_MODULE], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    const exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
    child.stdin.end(JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e', version: '1' } },
    }) + '\n' + JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }) + '\n');
    assert.equal(await exited, 0);
    const lines = out.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.id), [1, 2]);
    assert.equal(lines[0].result.protocolVersion, '2025-06-18');
  });
});
