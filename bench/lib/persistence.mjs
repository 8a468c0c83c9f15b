// Persistence (issue 14), measured with the official e2b JS SDK against an abxd whose pause goes
// to disk (CRIU): pause and resume of a `base` sandbox holding ~50 and ~500 MiB of touched
// memory, createSnapshot and a create from the snapshot, and a fork of 10. The runc peer (the
// same CRIU) was measured just before by bench/persistence.sh, which passes its numbers in
// BENCH_PEER_FILE; this prints the one table with the published figures beside ours.
// Env: BENCH_RUNS, BENCH_SIZES (MiB, comma list), BENCH_FORK_COUNT, BENCH_FORK_RUNS,
// BENCH_ABX_HOME (for the checkpoint's size on disk), BENCH_PEER_FILE, BENCH_HOLDER (the
// python3 program that holds the memory; MIB is replaced by the size), E2B_* (set by the script).
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Sandbox } from 'e2b';

const runs = Number(process.env.BENCH_RUNS || 5);
const sizes = (process.env.BENCH_SIZES || '50,500').split(',').map(Number);
const forkCount = Number(process.env.BENCH_FORK_COUNT || 10);
const forkRuns = Number(process.env.BENCH_FORK_RUNS || 1);
const home = process.env.BENCH_ABX_HOME || '';
const holder = process.env.BENCH_HOLDER;

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.round((p / 100) * (s.length - 1)))];
}
const fmt = (v) => (v === undefined || v === null || Number.isNaN(v) ? '-' : String(Math.round(v)));
const errText = (e) => String(e?.message ?? e).split('\n')[0].slice(0, 160);

// The peer's numbers: lines "<size> <step> <ms>" (step: pause, resume), or "unavailable <why>".
const peer = {};
let peerNote = 'not measured';
if (process.env.BENCH_PEER_FILE && existsSync(process.env.BENCH_PEER_FILE)) {
  for (const line of readFileSync(process.env.BENCH_PEER_FILE, 'utf8').split('\n')) {
    const m = /^(\d+) (\w+) (\d+)$/.exec(line);
    if (m) (peer[`${m[1]} ${m[2]}`] ??= []).push(Number(m[3]));
    else if (line.startsWith('unavailable ')) peerNote = `unavailable: ${line.slice(12)}`;
    else if (line.startsWith('note ')) peerNote = line.slice(5);
  }
}

const made = [];
async function create(template = 'base') {
  const sbx = await Sandbox.create(template, { timeoutMs: 1_800_000 });
  made.push(sbx.sandboxId);
  return sbx;
}
// Until the first envd call of `sbx` answers: files.read of the holder's ready file.
async function firstCall(sbx) {
  for (let i = 0; ; i++) {
    try {
      return await sbx.files.read('/tmp/ready');
    } catch (e) {
      if (i >= 500) throw e;
      await sleep(5);
    }
  }
}
// Starts the memory holder and waits until it has touched all of it; returns its pid.
async function hold(sbx, mib) {
  await sbx.commands.run(holder.replace('MIB', String(mib)), { background: true });
  for (let i = 0; i < 600; i++) {
    const pid = await sbx.files.read('/tmp/ready').catch(() => '');
    if (pid) return pid.trim();
    await sleep(50);
  }
  throw new Error('the memory holder did not start');
}
async function rssMiB(sbx, pid) {
  const r = await sbx.commands.run(`grep VmRSS /proc/${pid}/status`);
  return Number(/(\d+)/.exec(r.stdout)[1]) / 1024;
}
function duMiB(path) {
  const r = spawnSync('du', ['-sb', '--exclude=rw.img', path], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.split('\t')[0]) / 1048576 : NaN;
}

const rows = []; // {step, mib, ckpt, vals, peerKey, published, aim: [limit, text]}
const failures = [];
function fail(step, e) {
  failures.push(`${step}: ${errText(e)}`);
  rows.push({ step, failed: errText(e) });
}

try {
  // Warm the image, page cache and envd's first start: not measured.
  const warm = await create();
  await warm.kill();

  for (const mib of sizes) {
    const e2bPause = (4000 * mib) / 1024;
    try {
      const sbx = await create();
      const pid = await hold(sbx, mib);
      const rssBefore = await rssMiB(sbx, pid);
      const pause = [];
      const connect = [];
      const first = [];
      const ckpt = [];
      for (let i = 0; i < runs; i++) {
        let t = now();
        const ok = await sbx.pause();
        pause.push(now() - t);
        if (ok !== true) throw new Error(`pause returned ${ok}`);
        if (home) ckpt.push(duMiB(join(home, 'checkpoints', sbx.sandboxId))); // CRIU's images, not rw.img
        t = now();
        await Sandbox.connect(sbx.sandboxId);
        connect.push(now() - t);
        await firstCall(sbx);
        first.push(now() - t);
      }
      const rssAfter = await rssMiB(sbx, pid);
      if (rssAfter < 0.9 * rssBefore) throw new Error(`resident memory ${rssBefore} -> ${rssAfter} MiB`);
      const c = ckpt.length ? pct(ckpt, 50) : NaN;
      rows.push({ step: 'pause', mib: rssBefore, ckpt: c, vals: pause, peerKey: `${mib} pause`,
        published: `E2B ~${(e2bPause / 1000).toFixed(2)} s (4 s/GiB)`, aim: mib <= 64 ? [150, 'p50 <= 150 ms'] : null });
      rows.push({ step: 'resume: connect', mib: rssAfter, vals: connect, peerKey: `${mib} resume`,
        published: 'E2B ~1 s; Cube 42 ms' });
      rows.push({ step: 'resume: connect + first files.read', mib: rssAfter, vals: first, peerKey: `${mib} resume`,
        published: 'E2B ~1 s; Cube 42 ms', aim: mib <= 64 ? [60, 'p50 <= 60 ms'] : null });
      await sbx.kill();
    } catch (e) {
      fail(`pause/resume at ${mib} MiB`, e);
    }
  }

  // Snapshot and create from it, on a sandbox holding the first size.
  const mib = sizes[0];
  let src;
  try {
    src = await create();
    const pid = await hold(src, mib);
    const rss = await rssMiB(src, pid);
    const snap = [];
    const fromSnap = [];
    const fromSnapFirst = [];
    let snapErr = null;
    let createErr = null;
    for (let i = 0; i < runs && !snapErr; i++) {
      let s;
      try {
        const t = now();
        s = await src.createSnapshot();
        snap.push(now() - t);
      } catch (e) {
        snapErr = e;
        break;
      }
      try {
        const t = now();
        const child = await Sandbox.create(s.snapshotId, { timeoutMs: 600_000 });
        fromSnap.push(now() - t);
        made.push(child.sandboxId);
        await firstCall(child);
        fromSnapFirst.push(now() - t);
        await child.kill();
      } catch (e) {
        createErr ??= e;
      }
      await Sandbox.deleteSnapshot(s.snapshotId).catch(() => {});
    }
    if (snapErr) fail('createSnapshot', snapErr);
    else rows.push({ step: 'createSnapshot', mib: rss, vals: snap, published: 'Cube 46 ms (7 MB dirty)' });
    if (createErr) fail('Sandbox.create(snapshot)', createErr);
    else if (fromSnap.length) {
      rows.push({ step: 'Sandbox.create(snapshot)', mib: rss, vals: fromSnap, published: 'Cube 42 ms (resume)',
        aim: mib <= 64 ? [60, 'p50 <= 60 ms'] : null });
      rows.push({ step: 'Sandbox.create(snapshot) + first read', mib: rss, vals: fromSnapFirst, published: '' });
    }
  } catch (e) {
    fail('snapshot', e);
  }

  // Fork of forkCount, from the same source sandbox.
  try {
    if (!src) throw new Error('no source sandbox');
    const rss = await rssMiB(src, (await src.files.read('/tmp/ready')).trim());
    const times = [];
    let firstErr = null;
    let failed = 0;
    let lastDt;
    for (let i = 0; i < forkRuns; i++) {
      const t = now();
      const children = await src.fork({ count: forkCount });
      const dt = now() - t;
      lastDt = dt;
      const ok = children.filter((c) => c instanceof Sandbox);
      failed += children.length - ok.length;
      for (const c of children) if (!(c instanceof Sandbox)) firstErr ??= c;
      for (const c of ok) made.push(c.sandboxId);
      if (ok.length === forkCount) times.push(dt);
      for (const c of ok) await c.kill().catch(() => {});
    }
    if (firstErr)
      fail(`fork x${forkCount} (${failed} of ${forkCount * forkRuns} failed, ${fmt(lastDt)} ms)`, firstErr);
    if (times.length)
      rows.push({ step: `fork x${forkCount}`, mib: rss, vals: times, published: 'Cube clone 220 ms (96 cores)',
        aim: forkCount === 10 ? [300, 'p50 <= 300 ms'] : null });
  } catch (e) {
    fail(`fork x${forkCount}`, e);
  }
  if (src) await src.kill().catch(() => {});
} finally {
  for (const id of made) await Sandbox.kill(id).catch(() => {});
}

const head = ['step', 'MiB', 'ckpt MiB', 'p50 ms', 'max ms', 'runc p50', 'abx/runc', 'published'];
const w = [38, 5, 8, 8, 8, 9, 9, 0];
const line = (cols) => cols.map((c, i) => (i === 0 || i === 7 ? String(c).padEnd(w[i]) : String(c).padStart(w[i]))).join(' ');
console.log(line(head));
for (const r of rows) {
  if (r.failed) {
    console.log(`${r.step.padEnd(w[0])} FAILED: ${r.failed}`);
    continue;
  }
  const p = r.peerKey && peer[r.peerKey] ? pct(peer[r.peerKey], 50) : undefined;
  const ratio = p ? `${(pct(r.vals, 50) / p).toFixed(2)}x` : '-';
  console.log(line([r.step, fmt(r.mib), r.ckpt === undefined ? '' : fmt(r.ckpt), fmt(pct(r.vals, 50)),
    fmt(Math.max(...r.vals)), fmt(p), ratio, r.published]));
}
console.log(`runc peer (checkpoint / restore -d, same CRIU, same python3 holder): ${peerNote}`);
for (const r of rows) {
  if (!r.aim || r.failed) continue;
  const v = pct(r.vals, 50);
  console.log(`aim ${r.step} at ~${fmt(r.mib)} MiB ${r.aim[1]}: ${fmt(v)} ms ${v <= r.aim[0] ? 'PASS' : 'MISS'}`);
}
for (const f of failures) console.log(`FAILED ${f}`);
// bench/run.sh's summary rows (the format of bench_row in lib/load.sh): p50 of each step, beside
// runc's matching p50 when there is one.
if (process.env.BENCH_ROWS) {
  for (const r of rows) {
    if (r.failed) continue;
    const p = r.peerKey && peer[r.peerKey] ? pct(peer[r.peerKey], 50) : undefined;
    const peerName = !p ? '-' : r.step === 'pause' ? 'runc checkpoint' : 'runc restore -d';
    const fields = ['persistence', `${r.step} at ~${Math.round(r.mib)} MiB, p50`, Math.round(pct(r.vals, 50)),
      peerName, p === undefined ? '-' : Math.round(p), 'ms', 'lower', r.aim ? `<=${r.aim[0]}` : '-'];
    appendFileSync(process.env.BENCH_ROWS, fields.join('\t') + '\n');
  }
}
