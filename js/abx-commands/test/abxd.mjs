// Starts a real abxd for the tests: the binary from $ABXD_BIN (set by ctest), a temporary home,
// a free port on 127.0.0.1; points the e2b SDK at it (E2B_API_URL = E2B_SANDBOX_URL = that one
// listener, E2B_API_KEY from the home) the way tests/e2e/js does. stop() sends SIGTERM and
// removes the home.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export async function startAbxd() {
  const bin = process.env.ABXD_BIN;
  if (!bin) throw new Error('set ABXD_BIN to the abxd binary');
  const home = mkdtempSync(join(tmpdir(), 'abx-commands-js-'));
  const child = spawn(bin, ['--home', home, '--listen', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let url;
  try {
    url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('abxd did not print its address')), 20000);
      child.once('exit', (code, sig) => {
        clearTimeout(timer);
        reject(new Error(`abxd exited early: code ${code} signal ${sig}`));
      });
      createInterface({ input: child.stdout }).on('line', (line) => {
        const m = /^listening on (\S+):(\d+)$/.exec(line);
        if (m) {
          clearTimeout(timer);
          resolve(`http://127.0.0.1:${m[2]}`);
        }
      });
    });
  } catch (e) {
    rmSync(home, { recursive: true, force: true });
    throw e;
  }
  const apiKey = readFileSync(join(home, 'api_key'), 'utf8').trim();
  process.env.E2B_API_URL = url;
  process.env.E2B_SANDBOX_URL = url;
  process.env.E2B_API_KEY = apiKey;
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      await new Promise((resolve) => {
        child.removeAllListeners('exit');
        child.once('exit', resolve);
        child.kill('SIGTERM');
      });
    }
    rmSync(home, { recursive: true, force: true });
  };
  return { url, apiKey, home, stop };
}
