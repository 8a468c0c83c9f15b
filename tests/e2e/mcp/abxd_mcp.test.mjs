// abxd's platform tools driven by the official MCP TypeScript SDK, with real sandboxes: /mcp
// over Streamable HTTP (API-key auth) and `abx mcp` over stdio (StdioClientTransport, talking
// to the same abxd through libabx). Connect, list tools and check every schema, create a demo
// sandbox, run a shell command, write/read/list files, discover and call the demo command, kill
// the sandbox; bad arguments are JSON-RPC errors, failures inside the sandbox are tool errors.
//
// Env (set by ctest): ABXD_BIN, ABX_CLI_BIN. Needs root (abxd makes namespaces and cgroups).
import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StdioClientTransport} from '@modelcontextprotocol/sdk/client/stdio.js';
import {StreamableHTTPClientTransport} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {ErrorCode, McpError} from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import {mkdtempSync, readFileSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {after, before, describe, test} from 'node:test';

for (const v of ['ABXD_BIN', 'ABX_CLI_BIN']) {
  if (!process.env[v]) throw new Error(`${v} is not set (run through ctest)`);
}
const isRoot = process.getuid?.() === 0;

const TOOL_NAMES = [
  'call_command',
  'create_sandbox',
  'kill_sandbox',
  'list_commands',
  'list_files',
  'list_sandboxes',
  'read_file',
  'run_code',
  'run_shell',
  'write_file',
];
const REQUIRED = {
  call_command: ['sandboxId', 'name'],
  create_sandbox: undefined,
  kill_sandbox: ['sandboxId'],
  list_commands: ['sandboxId'],
  list_files: ['sandboxId', 'path'],
  list_sandboxes: undefined,
  read_file: ['sandboxId', 'path'],
  run_code: ['sandboxId', 'code'],
  run_shell: ['sandboxId', 'command'],
  write_file: ['sandboxId', 'path', 'content'],
};

let abxd;
let home;
let base;
let key;

function startAbxd() {
  return new Promise((resolve, reject) => {
    const child = spawn(
        process.env.ABXD_BIN,
        ['--home', home, '--listen', '127.0.0.1:0', '--log-level', 'warn'],
        {stdio: ['ignore', 'pipe', 'inherit']},
    );
    let out = '';
    const timer = setTimeout(() => reject(new Error('abxd did not start: ' + out)), 20000);
    child.on('exit', (code) => reject(new Error(`abxd exited with ${code}: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on ([\d.]+):(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({child, base: `http://${m[1]}:${m[2]}`});
      }
    });
  });
}

async function stopAbxd(args = []) {
  if (!abxd) return;
  abxd.removeAllListeners('exit');
  const exited = new Promise((r) => abxd.on('exit', r));
  abxd.kill('SIGTERM');
  await exited;
  // abxd leaves sandboxes running on SIGTERM; one more run with --kill-sandboxes removes any a
  // failed test left behind.
  const last = spawn(
      process.env.ABXD_BIN,
      ['--home', home, '--listen', '127.0.0.1:0', '--kill-sandboxes', ...args],
      {stdio: ['ignore', 'pipe', 'inherit']});
  await new Promise((r) => {
    last.stdout.on('data', (d) => {
      if (/listening on/.test(String(d))) last.kill('SIGTERM');
    });
    last.on('exit', r);
  });
}

async function connectHttp(apiKey = key, headerName = 'X-API-KEY') {
  const client = new Client({name: 'abx-e2e-abxd', version: '1.0.0'});
  const value = headerName === 'Authorization' ? `Bearer ${apiKey}` : apiKey;
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: {headers: {[headerName]: value}},
  });
  await client.connect(transport);
  return {client, transport};
}

async function connectStdio() {
  const transport = new StdioClientTransport({
    command: process.env.ABX_CLI_BIN,
    args: ['mcp'],
    env: {...process.env, ABX_API_URL: base, ABX_API_KEY: key, ABX_HOME: home},
    stderr: 'inherit',
  });
  const client = new Client({name: 'abx-e2e-abx-mcp', version: '1.0.0'});
  await client.connect(transport);
  return client;
}

async function expectMcpError(promise, code, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof McpError, `expected McpError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (pattern) assert.match(e.message, pattern);
    return true;
  });
}

function ok(res) {
  assert.equal(res.isError, false, JSON.stringify(res.content));
  // The text item is the structured result's JSON, for clients that only read text.
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
  return res.structuredContent;
}

function toolError(res, pattern) {
  assert.equal(res.isError, true, JSON.stringify(res));
  assert.equal(res.structuredContent, undefined);
  assert.match(res.content[0].text, pattern);
}

// The main job, the same over either transport.
async function mainJob(client) {
  const created = ok(await client.callTool({
    name: 'create_sandbox',
    arguments: {template: 'demo', timeoutSeconds: 120},
  }));
  const id = created.sandboxId;
  assert.match(id, /^[a-z0-9]{20}$/);
  assert.equal(created.templateId, 'demo');
  try {
    const listed = ok(await client.callTool({name: 'list_sandboxes', arguments: {}}));
    assert.ok(listed.sandboxes.some((s) => s.sandboxId === id && s.state === 'running'));

    const hi = ok(await client.callTool({
      name: 'run_shell',
      arguments: {sandboxId: id, command: 'echo hi'},
    }));
    assert.equal(hi.exitCode, 0);
    assert.equal(hi.stdout, 'hi\n');
    assert.equal(hi.stderr, '');
    // A failing command is data, not a tool error.
    const failed = ok(await client.callTool({
      name: 'run_shell',
      arguments: {sandboxId: id, command: 'echo oops >&2; exit 3', cwd: '/tmp', envs: {A: 'b'}},
    }));
    assert.equal(failed.exitCode, 3);
    assert.equal(failed.stderr, 'oops\n');
    const env = ok(await client.callTool({
      name: 'run_shell',
      arguments: {sandboxId: id, command: 'echo $A; pwd', cwd: '/tmp', envs: {A: 'b'}},
    }));
    assert.equal(env.stdout, 'b\n/tmp\n');

    const w = ok(await client.callTool({
      name: 'write_file',
      arguments: {sandboxId: id, path: '/tmp/mcp/hello.txt', content: 'héllo\n'},
    }));
    assert.deepEqual(w, {path: '/tmp/mcp/hello.txt', size: 7});
    const r = ok(await client.callTool({
      name: 'read_file',
      arguments: {sandboxId: id, path: '/tmp/mcp/hello.txt'},
    }));
    assert.deepEqual(
        r, {path: '/tmp/mcp/hello.txt', content: 'héllo\n', encoding: 'utf8', size: 7});
    // Bytes that are not UTF-8 travel as base64 both ways.
    const bin = Buffer.from([0, 255, 254, 10]).toString('base64');
    ok(await client.callTool({
      name: 'write_file',
      arguments: {sandboxId: id, path: '/tmp/mcp/bin', content: bin, encoding: 'base64'},
    }));
    const rb = ok(await client.callTool(
        {name: 'read_file', arguments: {sandboxId: id, path: '/tmp/mcp/bin'}}));
    assert.deepEqual(rb, {path: '/tmp/mcp/bin', content: bin, encoding: 'base64', size: 4});
    const ls = ok(
        await client.callTool({name: 'list_files', arguments: {sandboxId: id, path: '/tmp/mcp'}}));
    assert.deepEqual(
        ls.entries.map((e) => [e.name, e.type, e.size]).sort(),
        [['bin', 'file', 4], ['hello.txt', 'file', 7]]);

    // Two-layer discovery: the demo command server's registered commands.
    const {commands} =
        ok(await client.callTool({name: 'list_commands', arguments: {sandboxId: id}}));
    const demo = commands.find((c) => c.name === 'demo');
    assert.ok(demo, JSON.stringify(commands.map((c) => c.name)));
    assert.equal(demo.source, 'remote');
    assert.deepEqual(
        demo.args.map((a) => [a.name, a.type, a.required]),
        [['x', 'integer', true], ['y', 'string', false]]);
    const called = ok(await client.callTool({
      name: 'call_command',
      arguments: {sandboxId: id, name: 'demo', arguments: {x: 42, y: 'world'}},
    }));
    assert.deepEqual(called, {result: '42: world'});
    // The command's own argument check fails inside the sandbox: a tool error naming it.
    toolError(
        await client.callTool({
          name: 'call_command',
          arguments: {sandboxId: id, name: 'demo', arguments: {x: 'nope'}},
        }),
        /x/);
    toolError(
        await client.callTool({
          name: 'call_command',
          arguments: {sandboxId: id, name: 'no_such_command', arguments: {}},
        }),
        /NotFound|no_such_command/);
    // A command that throws.
    toolError(
        await client.callTool({
          name: 'call_command',
          arguments: {sandboxId: id, name: 'divide', arguments: {a: 1, b: 0}},
        }),
        /zero/);
    toolError(
        await client.callTool({
          name: 'read_file',
          arguments: {sandboxId: id, path: '/tmp/mcp/missing'},
        }),
        /NotFound/);
  } finally {
    const k = ok(await client.callTool({name: 'kill_sandbox', arguments: {sandboxId: id}}));
    assert.deepEqual(k, {sandboxId: id, killed: true});
  }
  toolError(await client.callTool({name: 'kill_sandbox', arguments: {sandboxId: id}}), /not found/);
  toolError(
      await client.callTool({name: 'run_shell', arguments: {sandboxId: id, command: 'true'}}),
      /not found/);
}

async function badArguments(client) {
  const P = ErrorCode.InvalidParams;
  await expectMcpError(client.callTool({name: 'no_such_tool', arguments: {}}), P, /unknown tool/);
  await expectMcpError(
      client.callTool({name: 'run_shell', arguments: {sandboxId: 'x'}}), P,
      /missing required argument 'command'/);
  await expectMcpError(
      client.callTool(
          {name: 'run_shell', arguments: {sandboxId: 'x', command: 'true', shell: 'zsh'}}),
      P, /unknown argument 'shell'/);
  await expectMcpError(
      client.callTool({name: 'run_shell', arguments: {sandboxId: 7, command: 'true'}}), P,
      /sandboxId' must be a string/);
  await expectMcpError(
      client.callTool(
          {name: 'run_shell', arguments: {sandboxId: 'x', command: 'true', timeoutSeconds: 0}}),
      P, /between 1 and 3600/);
  await expectMcpError(
      client.callTool({name: 'create_sandbox', arguments: {envs: {A: 1}}}), P,
      /envs\.A' must be a string/);
  await expectMcpError(
      client.callTool({
        name: 'write_file',
        arguments: {sandboxId: 'x', path: '/a', content: 'x', encoding: 'hex'}
      }),
      P, /must be one of/);
  await expectMcpError(
      client.callTool({
        name: 'write_file',
        arguments: {sandboxId: 'x', path: '/a', content: '!!', encoding: 'base64'}
      }),
      P, /base64/);
  // Well-formed, but the platform says no: tool errors the model can read.
  toolError(
      await client.callTool({name: 'create_sandbox', arguments: {template: 'no-such-template'}}),
      /no-such-template/);
  toolError(
      await client.callTool(
          {name: 'list_files', arguments: {sandboxId: 'aaaaaaaaaaaaaaaaaaaa', path: '/'}}),
      /not found/);
}

// run_code in a code-interpreter sandbox: state persists between calls, a figure comes back as
// an image content item, an exception is a result with isError (and the structured error).
async function codeJob(client) {
  const {sandboxId: id} = ok(await client.callTool({
    name: 'create_sandbox',
    arguments: {template: 'code-interpreter', timeoutSeconds: 180},
  }));
  try {
    const first = ok(await client.callTool({
      name: 'run_code',
      arguments: {sandboxId: id, code: 'x = 20\nprint("hi")\nx + 1'},
    }));
    assert.equal(first.stdout, 'hi\n');
    assert.equal(first.text, '21');
    const fig = await client.callTool({
      name: 'run_code',
      arguments: {sandboxId: id, code: 'import matplotlib.pyplot as plt; plt.plot([1, x]); plt.show()'},
    });
    assert.equal(fig.isError, false);
    const img = fig.content.find((c) => c.type === 'image');
    assert.ok(img, JSON.stringify(fig.structuredContent));
    assert.equal(img.mimeType, 'image/png');
    assert.ok(Buffer.from(img.data, 'base64').subarray(1, 4).toString() === 'PNG');
    const raised = await client.callTool(
        {name: 'run_code', arguments: {sandboxId: id, code: 'raise ValueError("boom")'}});
    assert.equal(raised.isError, true);
    assert.equal(raised.structuredContent.error.name, 'ValueError');
    assert.match(raised.content[0].text, /boom/);
  } finally {
    ok(await client.callTool({name: 'kill_sandbox', arguments: {sandboxId: id}}));
  }
}

function checkSchemas(tools) {
  assert.deepEqual(tools.map((t) => t.name), TOOL_NAMES);
  for (const t of tools) {
    assert.ok(t.description.length > 10, t.name);
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
    assert.deepEqual(t.inputSchema.required, REQUIRED[t.name], t.name);
    for (const r of REQUIRED[t.name] ?? [])
      assert.ok(t.inputSchema.properties[r], `${t.name}.${r}`);
    for (const [name, p] of Object.entries(t.inputSchema.properties)) {
      assert.ok(['string', 'integer', 'object'].includes(p.type), `${t.name}.${name}`);
      assert.ok(p.description, `${t.name}.${name} has a description`);
    }
    assert.equal(t.outputSchema?.type, 'object', t.name);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.list_sandboxes.annotations.readOnlyHint, true);
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.kill_sandbox.annotations.destructiveHint, true);
  assert.equal(byName.run_shell.annotations.readOnlyHint, false);
  assert.deepEqual(byName.run_shell.inputSchema.properties.timeoutSeconds, {
    type: 'integer',
    minimum: 1,
    maximum: 3600,
    description: byName.run_shell.inputSchema.properties.timeoutSeconds.description
  });
}

describe('abxd platform tools over MCP', {skip: !isRoot && 'abxd needs root'}, () => {
  before(async () => {
    home = mkdtempSync(join(tmpdir(), 'abxd-mcp-e2e-'));
    ({child: abxd, base} = await startAbxd());
    key = readFileSync(join(home, 'api_key'), 'utf8').trim();
  });
  after(async () => {
    await stopAbxd();
    if (home) rmSync(home, {recursive: true, force: true});
  });

  describe('POST /mcp (Streamable HTTP)', () => {
    let client;
    let transport;
    before(async () => {
      ({client, transport} = await connectHttp());
    });
    after(async () => {
      await client?.close();
    });

    test('connects with the API key and opens a session', async () => {
      assert.equal(client.getServerVersion().name, 'abxd');
      assert.ok(client.getServerCapabilities().tools);
      assert.ok(client.getInstructions().includes('create_sandbox'));
      assert.equal(transport.protocolVersion, '2025-06-18');
      assert.match(transport.sessionId, /^[0-9a-f]{32}$/);
      assert.deepEqual(await client.ping(), {});
    });

    test('tools/list: every tool with a strict input schema and an output schema', async () => {
      checkSchemas((await client.listTools()).tools);
    });

    test('main job: sandbox, shell, files, commands, kill', async () => {
      await mainJob(client);
    });

    test('run_code: stateful Python, images, exceptions', async () => {
      await codeJob(client);
    });

    test('bad arguments are -32602; platform failures are tool errors', async () => {
      await badArguments(client);
    });

    test('Authorization: Bearer works as well', async () => {
      const {client: c} = await connectHttp(key, 'Authorization');
      assert.deepEqual((await c.listTools()).tools.map((t) => t.name), TOOL_NAMES);
      await c.close();
    });

    test('a missing or wrong API key is refused before any session', async () => {
      await assert.rejects(
          connectHttp(
              'e2b_' +
              '0'.repeat(40)),
          /401|invalid API key/i);
      const r = await fetch(new URL('/mcp', base), {
        method: 'POST',
        headers:
            {'Content-Type': 'application/json', Accept: 'application/json, text/event-stream'},
        body: JSON.stringify({jsonrpc: '2.0', id: 1, method: 'ping'}),
      });
      assert.equal(r.status, 401);
    });

    test(
        'sessions: missing 400, unknown or ended 404, wrong version 400; GET 405; foreign Origin 403',
        async () => {
          const post = (headers, body) => fetch(new URL('/mcp', base), {
            method: 'POST',
            headers: {'Content-Type': 'application/json', 'X-API-KEY': key, ...headers},
            body: JSON.stringify(body),
          });
          const ping = {jsonrpc: '2.0', id: 1, method: 'ping'};
          let r = await post({}, ping);
          assert.equal(r.status, 400);
          assert.equal((await r.json()).error.code, -32600);
          r = await post({'Mcp-Session-Id': 'f'.repeat(32)}, ping);
          assert.equal(r.status, 404);
          assert.equal((await r.json()).error.code, -32001);
          r = await post(
              {'Mcp-Session-Id': transport.sessionId, 'MCP-Protocol-Version': '1999-01-01'}, ping);
          assert.equal(r.status, 400);
          r = await post(
              {'Mcp-Session-Id': transport.sessionId}, {jsonrpc: '2.0', id: 2, method: 'nope'});
          assert.equal((await r.json()).error.code, -32601);
          r = await post({'Mcp-Session-Id': transport.sessionId}, '{"jsonrpc":"2.0",');
          assert.equal(r.status, 400);
          r = await fetch(new URL('/mcp', base), {headers: {'X-API-KEY': key}});
          assert.equal(r.status, 405);
          r = await post({Origin: 'https://evil.example'}, ping);
          assert.equal(r.status, 403);
          // DELETE ends the session for good.
          r = await fetch(new URL('/mcp', base), {
            method: 'DELETE',
            headers: {'X-API-KEY': key, 'Mcp-Session-Id': transport.sessionId},
          });
          assert.equal(r.status, 204);
          r = await post({'Mcp-Session-Id': transport.sessionId}, ping);
          assert.equal(r.status, 404);
        });
  });

  describe('abx mcp (stdio, through libabx)', () => {
    let client;
    before(async () => {
      client = await connectStdio();
    });
    after(async () => {
      await client?.close();
    });

    test('serves the same tools as abxd /mcp', async () => {
      assert.equal(client.getServerVersion().name, 'abx');
      const viaStdio = (await client.listTools()).tools;
      checkSchemas(viaStdio);
      const {client: http} = await connectHttp();
      assert.deepEqual(viaStdio, (await http.listTools()).tools);
      await http.close();
    });

    test('main job: sandbox, shell, files, commands, kill', async () => {
      await mainJob(client);
    });

    test('run_code: stateful Python, images, exceptions', async () => {
      await codeJob(client);
    });

    test('bad arguments are -32602; platform failures are tool errors', async () => {
      await badArguments(client);
    });
  });
});
