// Process and port helpers shared by the cluster e2e tests (cluster.test.mjs, drain.test.mjs).
import { createServer } from 'node:net';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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
