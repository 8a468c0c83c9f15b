// The code interpreter (issue 17): the official @e2b/code-interpreter SDK, unmodified, against
// a real abxd and real sandboxes of the built-in `code-interpreter` template (the SDK asks for
// its own default, `code-interpreter-v1`, an alias), where abx-interp serves E2B's API on port
// 49999 over Jupyter kernels (Debian's python3-ipykernel):
// - state persists between runCode calls; execution counts grow;
// - stdout/stderr arrive through the streaming callbacks, in order;
// - an exception is an ExecutionError with name, value and traceback;
// - a matplotlib figure (plt.show() and a figure as the last expression) arrives as a PNG;
//   HTML, JSON and a pandas DataFrame as rich results;
// - contexts: create (cwd), list, isolation, restart (state gone), remove;
// - timeoutMs interrupts a runaway loop and the context stays usable (its state too);
// - envs per execution, restored afterwards, and never parsed as code;
// - bad input: unknown context, unknown language, malformed bodies; /execute needs the token,
//   context management does not (the SDK sends none there).
//
//   ABXD_BIN=build/dev/src/platform/abxd ABX_IMAGE_STORE=build/images \
//     node --test code-interpreter.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { request as httpRequest } from 'node:http';

import { NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter';

import { startAbxd } from './abxd.mjs';

let daemon;
let baseUrl;
let sbx;

before(async () => {
  daemon = await startAbxd('interp');
  ({ baseUrl } = daemon);
  sbx = await Sandbox.create({ timeoutMs: 600_000 });
  daemon.made.push(sbx.sandboxId);
});

after(async () => {
  if (daemon) await daemon.stop();
});

// A raw request to the interpreter through abxd's proxy, as the SDK routes it.
async function interp(path, { method = 'GET', body, token = sbx.envdAccessToken } = {}) {
  const headers = {
    'E2b-Sandbox-Id': sbx.sandboxId,
    'E2b-Sandbox-Port': '49999',
    'Content-Type': 'application/json',
  };
  if (token) headers['X-Access-Token'] = token;
  const res = await fetch(`${baseUrl}${path}`, { method, headers, body });
  return { status: res.status, text: await res.text() };
}

test('the template answers to the SDK default name and runs the interpreter', async () => {
  const info = await Sandbox.getInfo(sbx.sandboxId);
  assert.equal(info.templateId, 'code-interpreter');
});

test('state persists between calls; results and execution counts', async () => {
  let ex = await sbx.runCode('x = 41');
  assert.equal(ex.error, undefined);
  assert.equal(ex.text, undefined); // an assignment has no result
  ex = await sbx.runCode('x + 1');
  assert.equal(ex.text, '42');
  assert.equal(ex.results.length, 1);
  assert.equal(ex.results[0].isMainResult, true);
  const first = ex.executionCount;
  ex = await sbx.runCode('import math\nmath.sqrt(x + 8)');
  assert.equal(ex.text, '7.0');
  assert.equal(ex.executionCount, first + 1);
  ex = await sbx.runCode("'a string'");
  assert.equal(ex.text, 'a string'); // E2B drops the quotes of a string's repr
});

test('stdout and stderr stream through the callbacks, in order', async () => {
  const out = [];
  const err = [];
  const ex = await sbx.runCode(
    'import sys, time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.05)\nprint("oops", file=sys.stderr)',
    { onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line) },
  );
  assert.equal(out.join(''), 'line 0\nline 1\nline 2\n');
  assert.equal(err.join(''), 'oops\n');
  assert.deepEqual(ex.logs.stdout, out);
  assert.deepEqual(ex.logs.stderr, err);
  assert.equal(ex.error, undefined);
});

test('an exception becomes an ExecutionError with name, value and traceback', async () => {
  let seen;
  const ex = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => (seen = e) });
  assert.ok(ex.error);
  assert.equal(ex.error.name, 'ZeroDivisionError');
  assert.equal(ex.error.value, 'division by zero');
  // IPython's traceback, colours (ANSI escapes) included, as E2B's server passes it on.
  const plain = ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, '');
  assert.match(plain, /ZeroDivisionError/);
  assert.match(plain, /----> 3 f\(\)/);
  assert.equal(seen.name, 'ZeroDivisionError');
  // Output before the error still arrives.
  const partial = await sbx.runCode('print("before")\nraise ValueError("bad value")');
  assert.deepEqual(partial.logs.stdout, ['before\n']);
  assert.equal(partial.error.name, 'ValueError');
  assert.equal(partial.error.value, 'bad value');
});

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

test('matplotlib figures arrive as PNG results', async () => {
  let ex = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()',
  );
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  const figs = ex.results.filter((r) => r.png);
  assert.equal(figs.length, 1);
  assert.deepEqual(Buffer.from(figs[0].png, 'base64').subarray(0, 8), PNG);
  assert.ok(figs[0].formats().includes('png'));
  // A figure as the last expression.
  ex = await sbx.runCode('fig, ax = plt.subplots()\nax.bar(["a", "b"], [3, 5])\nfig');
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  const main = ex.results.find((r) => r.isMainResult);
  assert.ok(main && main.png, `results: ${JSON.stringify(ex.results.map((r) => r.formats()))}`);
  assert.deepEqual(Buffer.from(main.png, 'base64').subarray(0, 8), PNG);
});

test('HTML, JSON and DataFrame results', async () => {
  let ex = await sbx.runCode('from IPython.display import HTML, JSON, display\ndisplay(HTML("<b>hi</b>"))\nJSON({"a": [1, 2]})');
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  const html = ex.results.find((r) => r.html);
  assert.equal(html.html, '<b>hi</b>');
  assert.equal(html.isMainResult, false);
  const js = ex.results.find((r) => r.json);
  assert.deepEqual(js.json, { a: [1, 2] });
  assert.equal(js.isMainResult, true);
  ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"n": [1, 2], "sq": [1, 4]})');
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  assert.match(ex.results[0].html, /<table/);
  assert.match(ex.text, /sq/);
});

test('contexts: create with cwd, list, isolation, restart, remove', async () => {
  const a = await sbx.createCodeContext({ cwd: '/tmp' });
  const b = await sbx.createCodeContext();
  assert.equal(a.language, 'python');
  assert.equal(a.cwd, '/tmp');
  assert.equal(b.cwd, '/home/user');
  assert.notEqual(a.id, b.id);
  const list = await sbx.listCodeContexts();
  const ids = list.map((c) => c.id);
  assert.ok(ids.includes(a.id) && ids.includes(b.id), JSON.stringify(list));

  let ex = await sbx.runCode('import os\nos.getcwd()', { context: a });
  assert.equal(ex.text, '/tmp');
  await sbx.runCode('secret = "only in a"', { context: a });
  ex = await sbx.runCode('secret', { context: b });
  assert.equal(ex.error.name, 'NameError');
  ex = await sbx.runCode('secret', { context: a });
  assert.equal(ex.text, 'only in a');
  // Code runs as the sandbox's default user.
  ex = await sbx.runCode('import getpass\ngetpass.getuser()', { context: a });
  assert.equal(ex.text, 'user');

  await sbx.restartCodeContext(a);
  ex = await sbx.runCode('secret', { context: a });
  assert.equal(ex.error.name, 'NameError');
  ex = await sbx.runCode('import os\nos.getcwd()', { context: a });
  assert.equal(ex.text, '/tmp'); // same context, same cwd

  await sbx.removeCodeContext(a.id);
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === a.id));
  await assert.rejects(sbx.runCode('1', { context: a }), NotFoundError);
  await sbx.removeCodeContext(b);
  await assert.rejects(sbx.restartCodeContext(b), NotFoundError);
});

test('timeoutMs interrupts a runaway loop; the context keeps working and keeps its state', async () => {
  const ctx = await sbx.createCodeContext();
  await sbx.runCode('kept = 7', { context: ctx });
  await assert.rejects(sbx.runCode('while True:\n    pass', { context: ctx, timeoutMs: 2000 }), TimeoutError);
  const ex = await sbx.runCode('kept * 6', { context: ctx, timeoutMs: 30_000 });
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  assert.equal(ex.text, '42');
  await sbx.removeCodeContext(ctx);
});

test('a silent cell past its timeoutMs is interrupted, not left running', async () => {
  // The cell prints nothing while it sleeps: the SDK gives up and closes its connection, the
  // proxy closes its side to the interpreter, and the interpreter interrupts the cell (E2B's
  // behaviour). Left running, it would write the file 6 s in, and the next call in the context
  // would wait for it (issue 38).
  const ctx = await sbx.createCodeContext();
  const code = "import time, pathlib\ntime.sleep(6)\npathlib.Path('/tmp/abandoned').write_text('ran on')";
  await assert.rejects(sbx.runCode(code, { context: ctx, timeoutMs: 1000 }), TimeoutError);
  const ex = await sbx.runCode(
    "import time, os\ntime.sleep(7)\nos.path.exists('/tmp/abandoned')", { context: ctx, timeoutMs: 30_000 });
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  assert.equal(ex.text, 'False');
  await sbx.removeCodeContext(ctx);
});

test('envs apply to one execution and are restored afterwards, never parsed as code', async () => {
  const tricky = `it's "quoted"\n'); import os; os._exit(1) #`;
  let ex = await sbx.runCode('import os\nprint(os.environ["ABX_T"], os.environ["HOME"])', {
    envs: { ABX_T: tricky, HOME: '/elsewhere' },
  });
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback);
  assert.deepEqual(ex.logs.stdout, [`${tricky} /elsewhere\n`]);
  ex = await sbx.runCode('import os\nprint(os.environ.get("ABX_T"), os.environ["HOME"])');
  assert.deepEqual(ex.logs.stdout, ['None /home/user\n']);
});

test('bad input gets clear 4xx errors', async () => {
  await assert.rejects(sbx.runCode('1', { context: { id: 'no-such-context' } }), (e) => {
    assert.ok(e instanceof NotFoundError, String(e));
    assert.match(e.message, /no-such-context/);
    return true;
  });
  let r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: '1', language: 'cobol' }) });
  assert.equal(r.status, 400);
  assert.match(r.text, /cobol/);
  r = await interp('/execute', { method: 'POST', body: '{"code": ' });
  assert.equal(r.status, 400);
  assert.match(r.text, /JSON/);
  r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: 1 }) });
  assert.equal(r.status, 400);
  r = await interp('/execute', {
    method: 'POST',
    body: JSON.stringify({ code: '1', language: 'python', context_id: 'x' }),
  });
  assert.equal(r.status, 400);
  r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: '1', env_vars: { 'A=B': 'x' } }) });
  assert.equal(r.status, 400);
  r = await interp('/contexts', { method: 'POST', body: JSON.stringify({ cwd: '/no/such/dir' }) });
  assert.equal(r.status, 400);
  assert.match(r.text, /no\/such\/dir/);
  r = await interp('/contexts', { method: 'POST', body: JSON.stringify({ language: 'r' }) });
  assert.equal(r.status, 400);
});

// The token-free paths cannot be stretched to /execute with dot segments: fetch would normalise
// them away, so the raw target goes out through node:http. abxd's proxy exempts no path with a
// dot segment from the token (401), and nothing runs.
test('a /contexts/../execute target without a token runs no code', async () => {
  const url = new URL(baseUrl);
  const body = JSON.stringify({ code: 'open("/tmp/traversal-ran", "w").write("x")' });
  const status = await new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path: '/contexts/../execute',
        headers: {
          'E2b-Sandbox-Id': sbx.sandboxId,
          'E2b-Sandbox-Port': '49999',
          'Content-Type': 'application/json',
          'Content-Length': Buffer.byteLength(body),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  assert.equal(status, 401);
  assert.equal(await sbx.files.exists('/tmp/traversal-ran'), false);
});

test('/execute needs the access token; context management does not', async () => {
  let r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: '1' }), token: '' });
  assert.equal(r.status, 401);
  r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: '1' }), token: 'wrong' });
  assert.equal(r.status, 401);
  r = await interp('/contexts', { token: '' });
  assert.equal(r.status, 200);
  assert.ok(Array.isArray(JSON.parse(r.text)));
  r = await interp('/execute', { method: 'POST', body: JSON.stringify({ code: '6*7' }) });
  assert.equal(r.status, 200);
  const lines = r.text.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines.at(-1), { type: 'end_of_execution' });
  assert.equal(lines.find((l) => l.type === 'result').text, '42');
});

// Pause to disk (issue 14) takes the kernels with it: their variables come back on connect.
// Only where abxd pauses to disk (CRIU from scripts/install-criu.sh).
const criuPath = process.env.ABX_CRIU ?? '/usr/local/lib/abx/criu/criu';
test(
  'a pause to disk keeps the kernel and its variables',
  { skip: existsSync(criuPath) ? false : `no CRIU at ${criuPath}` },
  async () => {
    const own = await Sandbox.create({ timeoutMs: 600_000 });
    daemon.made.push(own.sandboxId);
    assert.equal((await own.runCode('kept = 41; import os; pid = os.getpid()')).error, undefined);
    const pid = (await own.runCode('pid')).text;
    assert.equal(await own.pause(), true);
    assert.equal((await Sandbox.getInfo(own.sandboxId)).state, 'paused');
    await Sandbox.connect(own.sandboxId);
    const after = await own.runCode('kept + 1');
    assert.equal(after.error, undefined);
    assert.equal(after.text, '42');
    assert.equal((await own.runCode('os.getpid()')).text, pid); // the same kernel process
    await own.kill();
  }
);
