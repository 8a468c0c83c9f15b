// A real abxd for one test file: a home of its own, port 0, the E2B SDK's environment pointed
// at it; stop() kills the sandboxes the file made, stops abxd (SIGTERM) and removes the home.
//
//   const daemon = await startAbxd('lifecycle');   // in before()
//   daemon.baseUrl, daemon.home, daemon.made.push(id)
//   await daemon.stop();                           // in after()
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { Sandbox } from 'e2b';

// Starts abxd on `home` and resolves with [process, baseUrl] once it listens. With `output`,
// what abxd prints (stdout and stderr) is also appended to `output.text` (stderr passed on to
// this process's); without it abxd's stderr is this process's own.
async function launch(home, extraArgs, port = 0, output = null) {
  // Sandboxes have outbound networking: their resolver forwards to a loopback port where nothing
  // answers, so no test's DNS question can reach a real resolver.
  const args = ['--home', home, '--listen', `127.0.0.1:${port}`, '--dns-upstream', '127.0.0.1:9'];
  const abxd = spawn(process.env.ABXD_BIN, [...args, ...extraArgs], {
    stdio: ['ignore', 'pipe', output ? 'pipe' : 'inherit'],
  });
  abxd.stderr?.on('data', (d) => {
    process.stderr.write(d);
    output.text += d;
  });
  const baseUrl = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('abxd did not print its address')), 20000);
    abxd.once('exit', (code) => reject(new Error(`abxd exited early: ${code}`)));
    createInterface({ input: abxd.stdout }).on('line', (line) => {
      if (output) output.text += `${line}\n`;
      const m = /^listening on (\S+):(\d+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(`http://127.0.0.1:${m[2]}`);
      }
    });
  });
  process.env.E2B_API_URL = baseUrl;
  process.env.E2B_SANDBOX_URL = baseUrl;
  process.env.E2B_API_KEY = readFileSync(join(home, 'api_key'), 'utf8').trim();
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
  return [abxd, baseUrl];
}

// Stops abxd with `signal` (SIGTERM leaves the sandboxes for the next abxd; so does SIGKILL).
function halt(abxd, signal) {
  if (abxd.exitCode !== null || abxd.signalCode !== null) return Promise.resolve();
  abxd.removeAllListeners('exit');
  return new Promise((resolve) => {
    abxd.once('exit', resolve);
    abxd.kill(signal);
  });
}

// `capture`: keep what abxd prints, in `output` (the console test looks for its API key there).
export async function startAbxd(name, extraArgs = [], { capture = false } = {}) {
  if (!process.env.ABXD_BIN) throw new Error('set ABXD_BIN to the abxd binary');
  const home = mkdtempSync(join(tmpdir(), `abx-js-${name}-`));
  const output = capture ? { text: '' } : null;
  const [abxd, baseUrl] = await launch(home, extraArgs, 0, output);
  const made = [];
  return {
    abxd,
    home,
    baseUrl,
    made,
    // With `capture`: everything this abxd (and its restarts) printed so far.
    get output() { return output ? output.text : ''; },
    // Stops this abxd (`signal`: SIGTERM, or SIGKILL for a crash) and starts a new one on the
    // same home and port, so the SDK's sandbox objects keep working.
    async restart(signal = 'SIGTERM') {
      await halt(this.abxd, signal);
      [this.abxd, this.baseUrl] = await launch(home, extraArgs, new URL(this.baseUrl).port, output);
    },
    async stop() {
      for (const id of made) await Sandbox.kill(id).catch(() => {});
      await halt(this.abxd, 'SIGTERM');
      rmSync(home, { recursive: true, force: true });
    },
  };
}

// An image store of the test's own under `dir`, standing on the shared one ($ABX_IMAGE_STORE,
// never written): its blobs and extracted layers hard-linked (no data copied; overlayfs only
// reads them, and the store never rewrites a file in place), and the names `names` that the
// shared store has. A test that builds templates passes it to abxd (--image-store), so its builds,
// build cache and tags stay out of the shared store. Returns the directory and the names it has.
export function privateImageStore(dir, names = ['base']) {
  const store = join(dir, 'images');
  mkdirSync(store, { recursive: true, mode: 0o700 });
  const shared = process.env.ABX_IMAGE_STORE;
  const have = [];
  if (shared && existsSync(join(shared, 'refs.json'))) {
    try {
      const refs = JSON.parse(readFileSync(join(shared, 'refs.json'), 'utf8')).refs ?? {};
      for (const sub of ['blobs', 'layers']) {
        if (existsSync(join(shared, sub))) execFileSync('cp', ['-al', join(shared, sub), store]);
      }
      const mine = {};
      for (const n of names) {
        if (refs[n]) {
          mine[n] = refs[n];
          have.push(n);
        }
      }
      writeFileSync(join(store, 'refs.json'), `${JSON.stringify({ refs: mine })}\n`, { mode: 0o600 });
    } catch (e) {
      process.stderr.write(`privateImageStore: ${e.message}: without the shared images\n`);
    }
  }
  return { store, names: have };
}