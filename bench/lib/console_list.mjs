// The console's sandbox list with many sandboxes (issue 42: "a list of 500 sandboxes stays
// smooth"), in Debian's chromium driven by puppeteer-core, against a real abxd with real
// sandboxes. The same page is measured with BENCH_FEW (50) sandboxes and then with BENCH_MANY
// (500): the peer is the console itself with few, which scrolls too. Rows in the DOM, frame
// times while the list scrolls at one speed (160 frames, down and back up), the main thread's
// long tasks (> 50 ms) over the scroll and two refreshes, and the time from a click on Pause to
// the first feedback on the status line. Run by bench/console-list.sh, which starts abxd. Each
// measurement waits (up to 90 s) for the machine to settle first and prints how busy the
// machine was during it.
import { appendFileSync, readFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const url = process.env.BENCH_ABXD_URL;
const key = process.env.BENCH_ABXD_KEY;
const few = Number(process.env.BENCH_FEW || 50);
const many = Number(process.env.BENCH_MANY || 500);
const headers = { 'X-API-Key': key, 'Content-Type': 'application/json' };

function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.round((p / 100) * (s.length - 1)))];
}

// The machine's busy and idle jiffies (/proc/stat), to see what else ran during a measurement.
function cpu() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { busy: f[0] + f[1] + f[2] + f[5] + f[6] + f[7], idle: f[3] + f[4] };
}
const busyPct = (a, b) => (100 * (b.busy - a.busy)) / Math.max(1, (b.busy - a.busy) + (b.idle - a.idle));
// Waits up to 90 s for the machine to be < 25% busy over a second (new sandboxes settle).
async function settle() {
  for (let i = 0; i < 90; i++) {
    const a = cpu();
    await new Promise((r) => setTimeout(r, 1000));
    if (busyPct(a, cpu()) < 25) return;
  }
}

let made = 0;
async function grow(n) {
  let need = n - made;
  made = n;
  const t0 = Date.now();
  while (need > 0) {
    const batch = Math.min(8, need);
    await Promise.all(Array.from({ length: batch }, async () => {
      const r = await fetch(`${url}/sandboxes`, { method: 'POST', headers,
        body: JSON.stringify({ templateID: 'base', timeout: 3600 }) });
      if (r.status !== 201) throw new Error(`create: ${r.status} ${await r.text()}`);
    }));
    need -= batch;
  }
  return (Date.now() - t0) / 1000;
}

async function measure(browser, n) {
  await settle();
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  await page.goto(`${url}/console/`);
  await page.waitForSelector('#api-key');
  await page.type('#api-key', key);
  await page.click('.signin button[type=submit]');
  await page.waitForFunction((k) => document.getElementById('count')?.textContent === `${k} of ${k}`,
    { timeout: 120000 }, n);
  const rows = await page.$$eval('#sandbox-list .row', (rs) => rs.length);
  const c0 = cpu();
  // Long tasks and frames while the list scrolls top to bottom, one step per frame, and over
  // the two refreshes (every 3 s) that follow.
  const m = await page.evaluate(async () => {
    const long = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) long.push(e.duration); })
      .observe({ type: 'longtask' });
    const v = document.getElementById('sandbox-list');
    const frames = [];
    let last = performance.now();
    // The same speed for both lists (an eighth of the view per frame, down to the end and back
    // up): each frame brings in as many new rows whatever the list's length.
    const step = v.clientHeight / 8;
    let pos = 0;
    let dir = 1;
    for (let i = 1; i <= 160; i++) {
      pos += dir * step;
      const max = v.scrollHeight - v.clientHeight;
      if (pos >= max) { pos = max; dir = -1; }
      if (pos <= 0) { pos = 0; dir = 1; }
      v.scrollTop = pos;
      await new Promise((r) => requestAnimationFrame(r));
      const now = performance.now();
      frames.push(now - last);
      last = now;
    }
    const bottom = v.querySelectorAll('.row').length;
    await new Promise((r) => setTimeout(r, 6500));
    return { frames, long, bottom };
  });
  // Feedback: from the click on a row's Pause to the first change of the status line.
  const feedback = await page.evaluate(() => new Promise((resolve) => {
    const st = document.getElementById('status');
    const btn = document.querySelector('#sandbox-list .row [data-action="pause"]');
    let t0 = 0;
    new MutationObserver((_, obs) => { obs.disconnect(); resolve(performance.now() - t0); })
      .observe(st, { childList: true, characterData: true, subtree: true });
    t0 = performance.now();
    btn.click();
  }));
  const busy = busyPct(c0, cpu());
  await page.close();
  return { rows, bottom: m.bottom, frames: m.frames, long: m.long, feedback, busy };
}

const browser = await puppeteer.launch({
  executablePath: process.env.ABX_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const out = {};
try {
  const tf = await grow(few);
  out.few = await measure(browser, few);
  const tm = await grow(many);
  console.log(`(created ${few} sandboxes in ${tf.toFixed(1)} s, then ${many - few} more in ${tm.toFixed(1)} s)`);
  out.many = await measure(browser, many);
} finally {
  await browser.close();
  // Kill what this run made (abxd --kill-sandboxes would too, but 500 may outlast its stop).
  const ids = [];
  for (let next = '', i = 0; i < 100; i++) {
    const q = new URLSearchParams({ limit: '100', ...(next ? { nextToken: next } : {}) });
    const r = await fetch(`${url}/v2/sandboxes?${q}`, { headers });
    ids.push(...(await r.json()).map((s) => s.sandboxID));
    next = r.headers.get('X-Next-Token') || '';
    if (!next) break;
  }
  for (let i = 0; i < ids.length; i += 8) {
    await Promise.all(ids.slice(i, i + 8).map((id) => fetch(`${url}/sandboxes/${id}`, { method: 'DELETE', headers })));
  }
}

const f = (v) => v.toFixed(1).padStart(9);
console.log(`console sandbox list: ${few} vs ${many} sandboxes, the same page (ms)`);
console.log(`${''.padEnd(44)}${`${few}`.padStart(9)}${`${many}`.padStart(10)}  ratio (${few}/${many})`);
const line = (label, a, b) => console.log(`${label.padEnd(44)}${f(a)} ${f(b)}  ${(a / b).toFixed(2)}x`);
console.log(`${'rows in the DOM (top, bottom)'.padEnd(44)}${`${out.few.rows}, ${out.few.bottom}`.padStart(9)}${`${out.many.rows}, ${out.many.bottom}`.padStart(10)}`);
line('scroll frame p50', pct(out.few.frames, 50), pct(out.many.frames, 50));
line('scroll frame p95', pct(out.few.frames, 95), pct(out.many.frames, 95));
line('scroll frame max', Math.max(...out.few.frames), Math.max(...out.many.frames));
console.log(`${'long tasks (> 50 ms): count, longest'.padEnd(44)}${`${out.few.long.length}, ${Math.max(0, ...out.few.long).toFixed(0)}`.padStart(9)}${`${out.many.long.length}, ${Math.max(0, ...out.many.long).toFixed(0)}`.padStart(10)}`);
line('click on Pause to status feedback', out.few.feedback, out.many.feedback);
console.log(`${'machine busy during it (all cores, %)'.padEnd(44)}${f(out.few.busy)} ${f(out.many.busy)}`);
if (process.env.BENCH_ROWS) {
  appendFileSync(process.env.BENCH_ROWS,
    `console\tconsole list scroll frame p95, ${many} sandboxes\t${Math.round(pct(out.many.frames, 95) * 1000)}\tthe same list with ${few}\t${Math.round(pct(out.few.frames, 95) * 1000)}\tus\tlower\t-\n`);
}
