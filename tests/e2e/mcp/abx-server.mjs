// Starts $ABX_SERVER_BIN on 127.0.0.1, port 0, with `args` and ABX_ACCESS_TOKEN=`token`; resolves
// to { child, base } once it prints where it listens (20 s at most).
import { spawn } from 'node:child_process';

export function startAbxServer(args, token) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.env.ABX_SERVER_BIN,
      [...args, '--host', '127.0.0.1', '--port', '0'],
      { env: { ...process.env, ABX_ACCESS_TOKEN: token }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    const timer = setTimeout(() => reject(new Error('abx-server did not start: ' + out)), 20000);
    child.on('exit', (code) => reject(new Error(`abx-server exited with ${code}: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on ([\d.]+):(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, base: `http://${m[1]}:${m[2]}` });
      }
    });
  });
}
