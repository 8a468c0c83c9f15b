// The code interpreter's round trip (issue 17), in one Node process with the official SDKs:
// @e2b/code-interpreter's runCode("x+1") on a warm context vs e2b's commands.run of the same
// snippet as `python3 -c` (a fresh interpreter per call, what run_code used to be), against the
// same sandbox; plus the first runCode of a new sandbox (its kernel starting) and of a new
// context. Prints one table with p50/p99 and the ratio. Run by bench/code_interpreter.sh.
import { appendFileSync } from 'node:fs';
import { Sandbox } from '@e2b/code-interpreter';

const runs = Number(process.env.BENCH_RUNS || 50);
const fresh = Number(process.env.BENCH_FRESH || 5);

function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.round((p / 100) * (s.length - 1)))];
}
const now = () => Number(process.hrtime.bigint() / 1000n); // µs

const firstSandbox = [];
const firstContext = [];
const made = [];
try {
  for (let i = 0; i < fresh; i++) {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    made.push(sbx);
    let t = now();
    const ex = await sbx.runCode('x = 1\nx + 1');
    firstSandbox.push(now() - t);
    if (ex.text !== '2') throw new Error(`unexpected result ${ex.text}`);
    const ctx = await sbx.createCodeContext();
    t = now();
    await sbx.runCode('1', { context: ctx });
    firstContext.push(now() - t);
  }
  const sbx = made[0];
  await sbx.runCode('x = 1');
  const warm = [];
  const oneShot = [];
  for (let i = 0; i < runs; i++) {
    let t = now();
    const ex = await sbx.runCode('x+1');
    warm.push(now() - t);
    if (ex.text !== '2') throw new Error(`unexpected result ${ex.text}`);
    t = now();
    const r = await sbx.commands.run("python3 -c 'x = 1; print(x+1)'");
    oneShot.push(now() - t);
    if (r.stdout.trim() !== '2') throw new Error(`unexpected stdout ${r.stdout}`);
  }
  const row = (name, a) =>
    console.log(`${name.padEnd(58)} ${String(pct(a, 50)).padStart(10)} ${String(pct(a, 99)).padStart(10)}`);
  console.log(`code interpreter (${runs} warm runs, ${fresh} fresh sandboxes)`);
  console.log(`${'path'.padEnd(58)} ${'p50 us'.padStart(10)} ${'p99 us'.padStart(10)}`);
  row('runCode("x+1"), warm context', warm);
  row('commands.run("python3 -c \'x = 1; print(x+1)\'")', oneShot);
  row('first runCode of a new sandbox (kernel start)', firstSandbox);
  row('first runCode of a new context (kernel start)', firstContext);
  const ratio = pct(oneShot, 50) / pct(warm, 50);
  console.log(`ratio (commands.run / runCode) at p50: ${ratio.toFixed(1)}x   aim >= 10x: ${ratio >= 10 ? 'met' : 'not met'}`);
  // bench/run.sh's summary rows (the format of bench_row in lib/load.sh).
  const benchRow = (...f) => process.env.BENCH_ROWS && appendFileSync(process.env.BENCH_ROWS, f.join('\t') + '\n');
  benchRow('code_interpreter', 'runCode("x+1") warm context, p50', pct(warm, 50),
    'commands.run python3 -c', pct(oneShot, 50), 'us', 'lower', '>=10x');
  benchRow('code_interpreter', 'first runCode of a new sandbox (kernel start), p50', pct(firstSandbox, 50),
    '-', '-', 'us', 'lower');
} finally {
  for (const s of made) await s.kill().catch(() => {});
}
