// `abx-server --python tools.py` (issue 37) through its /mcp, driven by the official MCP
// TypeScript SDK: the README's module (demo and bump) lists as two tools whose input schemas are
// GET /commands' arguments, tools/call answers as a call does, module state persists between
// tool calls, a bad argument is the C++ registry's error and a Python exception is a tool error.
//
// Env (set by ctest): ABX_SERVER_BIN, and ABX_PYTHON (the worker's python3: Debian's).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { startAbxServer } from './abx-server.mjs';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

if (!process.env.ABX_SERVER_BIN) throw new Error('ABX_SERVER_BIN is not set (run through ctest)');
const TOKEN = 'e2e-' + randomBytes(16).toString('hex');
const dir = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'abx-mcp-python-'));
const MODULE = `from abx import sandbox

counter = 0


@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"


@sandbox.register
def bump(by: int = 1) -> int:
    """State persists between calls."""
    global counter
    counter += by
    return counter


@sandbox.register
def divide(a: float, b: float) -> float:
    """a / b."""
    return a / b
`;

let child;
let base;
let client;

before(async () => {
  writeFileSync(join(dir, 'tools.py'), MODULE);
  ({ child, base } = await startAbxServer(
    ['--python', join(dir, 'tools.py'), '--log-level', 'warn'], TOKEN));
  client = new Client({ name: 'abx-python-e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers: { 'X-Access-Token': TOKEN } },
  }));
});

after(async () => {
  if (client) await client.close();
  if (child) {
    child.removeAllListeners('exit');
    child.kill('SIGTERM');
  }
  rmSync(dir, { recursive: true, force: true });
});

test('tools/list: the Python commands, with the schemas GET /commands gives', async () => {
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ['bump', 'demo', 'divide']);
  assert.equal(byName.demo.description, 'Run a demo command.');
  assert.deepEqual(byName.demo.inputSchema.required, ['x']);
  assert.equal(byName.demo.inputSchema.properties.x.type, 'integer');
  assert.equal(byName.demo.inputSchema.properties.y.type, 'string');
  assert.equal(byName.demo.inputSchema.properties.y.default, 'hello');
  const r = await fetch(new URL('/commands', base), { headers: { 'X-Access-Token': TOKEN } });
  const listed = (await r.json()).commands;
  for (const c of listed) {
    const props = byName[c.name].inputSchema.properties;
    assert.deepEqual(Object.keys(props).sort(), c.args.map((a) => a.name).sort(), c.name);
  }
});

test('tools/call answers as a call does, and module state persists', async () => {
  const demo = await client.callTool({ name: 'demo', arguments: { x: 42, y: 'world' } });
  assert.equal(demo.isError, false, JSON.stringify(demo));
  assert.deepEqual(demo.structuredContent, { result: '42: world' });
  // The text item is what POST /commands/demo answers.
  const rest = await fetch(new URL('/commands/demo', base), {
    method: 'POST',
    headers: { 'X-Access-Token': TOKEN, 'Content-Type': 'application/json' },
    body: JSON.stringify({ x: 42, y: 'world' }),
  });
  assert.deepEqual(JSON.parse(demo.content[0].text), await rest.json());
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const b = await client.callTool({ name: 'bump', arguments: {} });
    seen.push(b.structuredContent.result);
  }
  assert.deepEqual(seen, [1, 2, 3]);
});

test('a bad argument is refused by the registry; a Python exception is a tool error', async () => {
  await assert.rejects(
    client.callTool({ name: 'demo', arguments: { x: 'not a number' } }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams,
  );
  const res = await client.callTool({ name: 'divide', arguments: { a: 1, b: 0 } });
  assert.equal(res.isError, true);
  assert.match(res.content[0].text, /division by zero/);
  assert.match(res.content[0].text, /ZeroDivisionError/);
  const ok = await client.callTool({ name: 'divide', arguments: { a: 1, b: 4 } });
  assert.deepEqual(ok.structuredContent, { result: 0.25 });
});
