// The web console's first paint and weight (issue 42), in Debian's chromium driven by
// puppeteer-core: abxd serving /console/ vs nginx serving the same files with the same headers,
// alternating, each load in a fresh browser context with the cache off. Per load: first
// contentful paint, the time until the sign-in form exists (app.js and its modules ran), and
// the bytes transferred. Prints one table with p50/p95 and the ratio. Run by bench/console.sh.
import { appendFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const runs = Number(process.env.BENCH_RUNS || 30);
const servers = { abxd: process.env.BENCH_ABXD_URL, nginx: process.env.BENCH_NGINX_URL };

function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.round((p / 100) * (s.length - 1)))];
}

const browser = await puppeteer.launch({
  executablePath: process.env.ABX_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const res = { abxd: { fcp: [], ready: [], bytes: [] }, nginx: { fcp: [], ready: [], bytes: [] } };
try {
  for (let i = 0; i < runs + 2; i++) {
    for (const [name, url] of Object.entries(servers)) {
      const ctx = await browser.createBrowserContext();
      const page = await ctx.newPage();
      await page.setCacheEnabled(false);
      await page.goto(`${url}/console/`, { waitUntil: 'load' });
      await page.waitForSelector('#api-key');
      const m = await page.evaluate(() => {
        const ready = performance.now();
        const fcp = performance.getEntriesByName('first-contentful-paint')[0];
        const nav = performance.getEntriesByType('navigation')[0];
        const bytes = performance.getEntriesByType('resource').reduce((n, r) => n + r.transferSize, nav.transferSize);
        return { fcp: fcp ? fcp.startTime : NaN, ready, bytes };
      });
      await ctx.close();
      if (i < 2) continue;  // warm-up: the first loads start chromium's own machinery
      res[name].fcp.push(m.fcp);
      res[name].ready.push(m.ready);
      res[name].bytes.push(m.bytes);
    }
  }
} finally {
  await browser.close();
}

const f = (v) => v.toFixed(1).padStart(8);
console.log(`console first load, ${runs} loads each, fresh context, cache off (ms from navigation start)`);
console.log(`${''.padEnd(34)}${'abxd p50'.padStart(10)}${'p95'.padStart(9)}${'nginx p50'.padStart(11)}${'p95'.padStart(9)}  ratio p50 (nginx/abxd)`);
for (const [k, label] of [['fcp', 'first contentful paint'], ['ready', 'sign-in form ready (modules ran)']]) {
  const a = pct(res.abxd[k], 50);
  const n = pct(res.nginx[k], 50);
  console.log(`${label.padEnd(34)}${f(a)}  ${f(pct(res.abxd[k], 95))}  ${f(n)}  ${f(pct(res.nginx[k], 95))}  ${(n / a).toFixed(2)}x`);
  if (process.env.BENCH_ROWS) {
    appendFileSync(process.env.BENCH_ROWS, `console\tconsole ${label}, p50\t${Math.round(a * 1000)}\tnginx, same files\t${Math.round(n * 1000)}\tus\tlower\t-\n`);
  }
}
console.log(`bytes transferred per first load: abxd ${pct(res.abxd.bytes, 50)}, nginx ${pct(res.nginx.bytes, 50)} (no compression on either)`);
