// abx-commands (the compiled dist/) against a real abxd, with sandboxes made by the official e2b
// SDK: discovery with schemas, calls, every typed error, scoped tokens minted through abxd, and a
// sandbox without a command server. Every sandbox made here is killed in after() and checked gone.
//
//   npx tsc && ABXD_BIN=build/dev/src/platform/abxd node --test test/
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { Sandbox } from 'e2b';

import {
  AbxCommandError,
  AbxCommands,
  CommandFailedError,
  CommandNotFoundError,
  CommandTimeoutError,
  InvalidArgumentsError,
  ServerUnavailableError,
  UnauthorizedError,
  commands,
} from '../dist/index.js';
import { startAbxd } from './abxd.mjs';

const SUITE = { suite: 'abx-commands-js' };

let abxd;
let demo; // e2b Sandbox of template 'demo'
let base; // e2b Sandbox of template 'base' (no command server)
let cmds; // AbxCommands of `demo`

before(async () => {
  abxd = await startAbxd();
  [demo, base] = await Promise.all([
    Sandbox.create('demo', { metadata: SUITE }),
    Sandbox.create('base', { metadata: SUITE }),
  ]);
  cmds = commands(demo);
});

after(async () => {
  try {
    if (abxd) {
      const left = await Sandbox.list({ query: { metadata: SUITE } }).nextItems();
      await Promise.all(left.map((s) => Sandbox.kill(s.sandboxId)));
      const still = await Sandbox.list({ query: { metadata: SUITE } }).nextItems();
      assert.deepEqual(still, [], 'sandboxes of this suite left alive');
    }
  } finally {
    await abxd?.stop();
  }
});

// assert.rejects with a class and the fields every AbxCommandError carries.
async function rejectsWith(promise, cls, fields) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e?.name}: ${e?.message}`);
    assert.ok(e instanceof AbxCommandError);
    assert.equal(e.name, cls.name);
    for (const [k, v] of Object.entries(fields)) {
      if (v instanceof RegExp) assert.match(String(e[k]), v, `${k}`);
      else assert.deepEqual(e[k], v, `${k}`);
    }
    return true;
  });
}

// A Python module (issue 37): `server: {python: …}` in a template built through abxd's
// POST /templates/build; the same client, the same schemas and the same typed errors as C++.
const PY_MODULE = `from abx import sandbox

counter = 0


@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    \"\"\"Run a demo command.\"\"\"
    return f"{x}: {y}"


@sandbox.register
def bump(by: int = 1) -> int:
    \"\"\"State persists between calls.\"\"\"
    global counter
    counter += by
    return counter


@sandbox.register
def ratio(a: float, b: float) -> float:
    \"\"\"a / b, refusing b = 0.\"\"\"
    if b == 0:
        raise ValueError("b must not be 0")
    return a / b
`;

async function buildPythonTemplate(name) {
  const ctx = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'abx-commands-py-'));
  try {
    writeFileSync(join(ctx, 'tools.py'), PY_MODULE);
    writeFileSync(join(ctx, 'Dockerfile'), 'FROM base\nCOPY tools.py /opt/tools/tools.py\n');
    writeFileSync(join(ctx, 'template.yaml'), `id: ${name}\nserver:\n  python: /opt/tools/tools.py\n`);
    const { stdout: context } = await promisify(execFile)('tar', ['-cf', '-', '-C', ctx, '.'], {
      encoding: 'buffer', maxBuffer: 16 << 20,
    });
    const res = await fetch(`${abxd.url}/templates/build?name=${name}&dockerfile=Dockerfile`, {
      method: 'POST', body: context,
      headers: { 'X-API-Key': abxd.apiKey, 'Content-Type': 'application/x-tar' },
    });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const last = JSON.parse(text.trim().split('\n').pop());
    assert.equal(last.type, 'done', text);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}

describe('Python module sandbox (abx-server --python)', () => {
  let py;
  before(async () => {
    await buildPythonTemplate('pytools-js');
    py = commands(await Sandbox.create('pytools-js', { metadata: SUITE }));
  });

  test('listCommands: the functions with the schema shape C++ commands have', async () => {
    const byName = Object.fromEntries((await py.listCommands()).map((c) => [c.name, c]));
    assert.deepEqual(Object.keys(byName).sort(), ['bump', 'demo', 'ratio']);
    assert.equal(byName.demo.description, 'Run a demo command.');
    assert.deepEqual(
      byName.demo.args.map(({ name, type, required, default: d }) => ({ name, type, required, default: d })),
      [
        { name: 'x', type: 'integer', required: true, default: null },
        { name: 'y', type: 'string', required: false, default: 'hello' },
      ]
    );
    assert.deepEqual(byName.ratio.args.map((a) => [a.name, a.type]), [['a', 'float'], ['b', 'float']]);
  });

  test('callCommand: results, module state, and the typed errors', async () => {
    assert.equal(await py.callCommand('demo', { x: 42, y: 'world' }), '42: world');
    assert.equal(await py.callCommand('bump'), 1);
    assert.equal(await py.callCommand('bump', { by: 2 }), 3);
    assert.equal(await py.callCommand('ratio', { a: 3, b: 2 }), 1.5);
    await rejectsWith(py.callCommand('demo', { x: 'forty-two' }), InvalidArgumentsError, {
      status: 400, field: 'x', command: 'demo', message: /argument 'x' must be an integer, got string/,
    });
    await rejectsWith(py.callCommand('ratio', { a: 1, b: 0 }), CommandFailedError, {
      status: 500, code: 'ValueError', message: 'b must not be 0',
    });
    await rejectsWith(py.callCommand('nope'), CommandNotFoundError, { status: 404 });
  });
});

describe('demo sandbox (command server on 49982)', () => {
  test('listCommands: the demo module with typed schemas', async () => {
    const list = await cmds.listCommands();
    const byName = Object.fromEntries(list.map((c) => [c.name, c]));
    for (const n of ['demo', 'add', 'scale', 'is_even', 'repeat', 'divide', 'sleep_ms', 'noop']) {
      assert.ok(byName[n], `${n} missing from ${list.map((c) => c.name)}`);
    }
    assert.equal(byName.demo.description, 'Run a demo command.');
    assert.deepEqual(
      byName.demo.args.map(({ name, type, required, default: d }) => ({ name, type, required, default: d })),
      [
        { name: 'x', type: 'integer', required: true, default: null },
        { name: 'y', type: 'string', required: false, default: 'hello' },
      ]
    );
    assert.deepEqual(
      byName.add.args.map((a) => [a.name, a.type, a.required, a.default]),
      [
        ['a', 'integer', true, null],
        ['b', 'integer', false, 0],
      ]
    );
    assert.deepEqual(
      byName.scale.args.map((a) => [a.name, a.type, a.default]),
      [
        ['value', 'float', null],
        ['factor', 'float', 2.5],
      ]
    );
    assert.deepEqual(
      byName.repeat.args.map((a) => [a.name, a.type, a.required, a.default]),
      [
        ['word', 'string', true, null],
        ['times', 'integer', false, 3],
        ['upper', 'boolean', false, false],
      ]
    );
    assert.deepEqual(byName.noop.args, []);
  });

  test('callCommand: results of every JSON shape', async () => {
    assert.equal(await cmds.callCommand('demo', { x: 42, y: 'world' }), '42: world');
    assert.equal(await cmds.callCommand('demo', { x: 7 }), '7: hello');
    assert.equal(await cmds.callCommand('add', { a: 2, b: 40 }), 42);
    assert.equal(await cmds.callCommand('is_even', { n: 3 }), false);
    assert.deepEqual(await cmds.callCommand('repeat', { word: 'ab', times: 2, upper: true }), ['AB', 'AB']);
    assert.deepEqual(await cmds.callCommand('word_lengths', { text: 'a bb ccc' }), { a: 1, bb: 2, ccc: 3 });
    assert.equal(await cmds.callCommand('noop'), null);
  });

  test('a wrong argument type is InvalidArgumentsError naming the field', async () => {
    await rejectsWith(cmds.callCommand('demo', { x: 'forty-two' }), InvalidArgumentsError, {
      status: 400,
      code: 'InvalidArgument',
      field: 'x',
      fields: ['x'],
      command: 'demo',
      message: /argument 'x' must be an integer, got string/,
    });
    await rejectsWith(cmds.callCommand('repeat', { word: 'w', upper: 1 }), InvalidArgumentsError, {
      field: 'upper',
    });
  });

  test('unknown and missing arguments name theirs too', async () => {
    await rejectsWith(cmds.callCommand('demo', { x: 1, z: 2, w: 3 }), InvalidArgumentsError, {
      status: 400,
      field: 'z',
      fields: ['z', 'w'],
      message: /unknown arguments 'z', 'w' for command 'demo'/,
    });
    await assert.rejects(cmds.callCommand('demo', { x: 1, z: 2 }), (e) => {
      assert.ok(e instanceof InvalidArgumentsError);
      assert.equal(e.field, 'z');
      return true;
    });
    await rejectsWith(cmds.callCommand('add', {}), InvalidArgumentsError, {
      field: 'a',
      message: /missing required argument 'a'/,
    });
  });

  test('an unknown command is CommandNotFoundError', async () => {
    await rejectsWith(cmds.callCommand('no_such_command', {}), CommandNotFoundError, {
      status: 404,
      code: 'NotFound',
      command: 'no_such_command',
    });
  });

  test('a command that throws is CommandFailedError with its exception class', async () => {
    await rejectsWith(cmds.callCommand('divide', { a: 1, b: 0 }), CommandFailedError, {
      status: 500,
      code: 'std::domain_error',
      message: 'division by zero',
    });
  });

  test('timeoutMs: a slow call is CommandTimeoutError', async () => {
    const t0 = Date.now();
    await rejectsWith(cmds.callCommand('sleep_ms', { ms: 3000 }, { timeoutMs: 200 }), CommandTimeoutError, {
      status: 0,
      code: 'Timeout',
      command: 'sleep_ms',
    });
    assert.ok(Date.now() - t0 < 2500, 'gave up at the client timeout, not the command end');
    // A call within its timeout still works.
    assert.equal(await cmds.callCommand('sleep_ms', { ms: 10 }, { timeoutMs: 10_000 }), 'slept 10 ms');
  });

  test('a wrong access token is UnauthorizedError', async () => {
    await rejectsWith(cmds.withToken('not-the-token').callCommand('demo', { x: 1 }), UnauthorizedError, {
      status: 401,
    });
    await rejectsWith(cmds.withToken('not-the-token').listCommands(), UnauthorizedError, { status: 401 });
  });

  test('scopedToken(["demo"]): demo runs, every other command is out of reach', async () => {
    const before = Date.now();
    const st = await cmds.scopedToken(['demo'], 120);
    assert.match(st.token, /^abxs1\./);
    assert.deepEqual(st.commands, ['demo']);
    const ttl = st.expiresAt.getTime() - before;
    assert.ok(ttl > 100_000 && ttl < 125_000, `expiresAt ${st.expiresAt.toISOString()}`);

    const scoped = cmds.withToken(st.token);
    assert.deepEqual(
      (await scoped.listCommands()).map((c) => c.name),
      ['demo']
    );
    assert.equal(await scoped.callCommand('demo', { x: 5, y: 'scoped' }), '5: scoped');
    await rejectsWith(scoped.callCommand('add', { a: 1, b: 2 }), CommandNotFoundError, {
      status: 404,
      code: 'NotFound',
      command: 'add',
    });

    // What another process holding only the id and the token builds.
    const handedOver = new AbxCommands({
      sandboxId: demo.sandboxId,
      accessToken: st.token,
      sandboxUrl: abxd.url,
    });
    assert.equal(await handedOver.callCommand('demo', { x: 6 }), '6: hello');
    await rejectsWith(handedOver.callCommand('divide', { a: 1, b: 1 }), CommandNotFoundError, {});

    // The scoped token is not the sandbox's token: envd (49983) refuses it.
    const envd = await fetch(`${abxd.url}/health`, {
      headers: { 'E2b-Sandbox-Id': demo.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': st.token },
    });
    await envd.body?.cancel();
    assert.equal(envd.status, 401);
  });

  test('an expired scoped token is UnauthorizedError', async () => {
    const st = await cmds.scopedToken(['demo'], 1);
    await new Promise((r) => setTimeout(r, 2100));
    await rejectsWith(cmds.withToken(st.token).callCommand('demo', { x: 1 }), UnauthorizedError, {
      status: 401,
      code: 'Unauthenticated',
    });
  });

  test('scopedToken errors are typed', async () => {
    await rejectsWith(cmds.scopedToken([]), InvalidArgumentsError, { status: 400 });
    await rejectsWith(new AbxCommands({ sandboxId: demo.sandboxId, sandboxUrl: abxd.url, apiKey: 'e2b_' + '0'.repeat(40) }).scopedToken(['demo']), UnauthorizedError, { status: 401 });
    await rejectsWith(
      new AbxCommands({ sandboxId: 'a'.repeat(20), sandboxUrl: abxd.url }).scopedToken(['demo']),
      AbxCommandError,
      { status: 404, code: 'NotFound' }
    );
  });
});

describe('base sandbox (no command server)', () => {
  test('listCommands and callCommand are ServerUnavailableError', async () => {
    const c = commands(base);
    await rejectsWith(c.listCommands(), ServerUnavailableError, { status: 403, message: /private/ });
    await rejectsWith(c.callCommand('demo', { x: 1 }), ServerUnavailableError, { command: 'demo' });
    // envd in the same sandbox works: the e2b SDK and this client share the sandbox's credentials.
    assert.equal((await base.commands.run('echo ok')).stdout, 'ok\n');
  });

  test('a killed sandbox is ServerUnavailableError', async () => {
    const gone = await Sandbox.create('demo', { metadata: SUITE });
    const c = commands(gone);
    await c.listCommands(); // waits for the command server to listen
    assert.equal(await c.callCommand('add', { a: 1 }), 1);
    assert.equal(await gone.kill(), true);
    await rejectsWith(c.callCommand('add', { a: 1 }), ServerUnavailableError, { status: 502 });
  });

  test('nothing listening at all is ServerUnavailableError (status 0)', async () => {
    const c = new AbxCommands({ sandboxId: demo.sandboxId, baseUrl: 'http://127.0.0.1:1', retries: 1 });
    await rejectsWith(c.listCommands(), ServerUnavailableError, { status: 0, code: 'Unavailable' });
  });
});

describe('the README example (examples/quickstart.ts)', () => {
  const compiled = fileURLToPath(new URL('../dist-examples/quickstart.js', import.meta.url));

  test('runs as documented and kills its sandbox', { skip: !existsSync(compiled) && 'npm run example first' }, async () => {
    const running = async () => (await Sandbox.list({ query: { state: ['running'] } }).nextItems()).length;
    const before = await running();
    const { stdout } = await promisify(execFile)(process.execPath, [compiled], { env: process.env, timeout: 60_000 });
    const lines = stdout.trim().split('\n');
    assert.ok(lines.includes('demo(x: integer, y: string = "hello") — Run a demo command.'), stdout);
    assert.ok(lines.includes('add(a: integer, b: integer = 0) — Add two integers.'), stdout);
    assert.ok(lines.includes('42: world'), stdout);
    assert.ok(lines.some((l) => /^bad argument x: argument 'x' must be an integer, got string$/.test(l)), stdout);
    assert.ok(lines.some((l) => /^1: hello until \d{4}-/.test(l)), stdout);
    assert.ok(lines.includes('add is out of scope'), stdout);
    assert.equal(await running(), before);
  });
});
