// abxd's web console (issue 42) in a real browser: Debian's chromium, headless, driven by
// puppeteer-core (no browser download), against a real abxd with real sandboxes. Covers the
// headers of /console and --no-console (no browser needed), then sign-in, create, a command
// form call with a bad and a good argument, file upload / view / download / delete, terminal
// echo, pause / resume and kill, with no CSP violation on the way. ABX_CONSOLE_SCREENSHOTS=<dir>
// keeps a screenshot of each page there (docs/console/).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { startAbxd } from './abxd.mjs';

const chromium = process.env.ABX_CHROMIUM || '/usr/bin/chromium';
const criu = process.env.ABX_CRIU ?? '/usr/local/lib/abx/criu/criu';
const shots = process.env.ABX_CONSOLE_SCREENSHOTS || '';
// Whether this abxd embeds @xterm/xterm (set by tests/e2e/CMakeLists.txt; OFF for a build with
// -DABX_CONSOLE_XTERM=OFF or without npm): the terminal is then expected to say so.
const xtermEmbedded = (process.env.ABX_CONSOLE_XTERM || 'ON') !== 'OFF';
// A 1x1 PNG, for the file browser's image view.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

// The form fields of the page that no label names (a <label> or aria-label).
const unlabelled = (page) => page.evaluate(() => [...document.querySelectorAll('input, select, textarea')]
  .filter((e) => e.type !== 'hidden' && !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
  .map((e) => e.id || e.outerHTML.slice(0, 80)));

let daemon;
const key = () => readFileSync(join(daemon.home, 'api_key'), 'utf8').trim();
before(async () => { daemon = await startAbxd('console', ['--log-level', 'debug'], { capture: true }); });
after(async () => { await daemon?.stop(); });

test('/console carries a strict CSP and no key; --no-console answers 404', async () => {
  const res = await fetch(`${daemon.baseUrl}/console`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  const csp = res.headers.get('content-security-policy');
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /style-src 'self'(;|$)/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
  assert.equal(res.headers.get('cache-control'), 'no-store');
  assert.equal(res.headers.get('set-cookie'), null);
  assert.match(await res.text(), /<script type="module" src="\/console\/app.js">/);
  const js = await fetch(`${daemon.baseUrl}/console/app.js`);
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  assert.match(js.headers.get('content-security-policy'), /script-src 'self'/);
  const xterm = await fetch(`${daemon.baseUrl}/console/vendor/xterm.mjs`);
  if (xtermEmbedded) {
    assert.equal(xterm.status, 200, 'xterm is embedded at build time');
    assert.match(await xterm.text(), /export\s*\{[^}]*Terminal/);
  } else {
    assert.equal(xterm.status, 404, 'built with ABX_CONSOLE_XTERM=OFF: no xterm');
  }
  assert.equal((await fetch(`${daemon.baseUrl}/console/nothing.js`)).status, 404);
  assert.equal((await fetch(`${daemon.baseUrl}/console/`, { method: 'POST' })).status, 400);

  const env = { ...process.env };  // startAbxd points the environment at the new abxd
  const off = await startAbxd('console-off', ['--no-console']);
  try {
    for (const p of ['/console', '/console/', '/console/app.js']) {
      const r = await fetch(`${off.baseUrl}${p}`);
      assert.equal(r.status, 404, p);
      assert.match((await r.json()).message, /--no-console/);
    }
    assert.equal((await fetch(`${off.baseUrl}/health`)).status, 200);
  } finally {
    await off.stop();
    Object.assign(process.env, env);
  }
});

test('the console drives sandboxes, commands, files and a terminal in chromium', {
  skip: !existsSync(chromium) && `no ${chromium} (scripts/install-deps.sh installs chromium)`,
}, async () => {
  const { default: puppeteer } = await import('puppeteer-core');
  const downloads = mkdtempSync(join(tmpdir(), 'abx-console-dl-'));
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root (the e2e suites run as root) needs chromium's own sandbox off.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  const problems = [];
  // Requests the browser gave up on (a closed connection, a reset): named with their sandbox
  // port, for the log of a failed run.
  const failedRequests = [];
  const urls = [];  // every URL the page asked for: the key must be in none
  const a11y = [];  // form fields without a label, per page
  const labelled = async (where) => {
    for (const f of await unlabelled(page)) a11y.push(`${where}: ${f}`);
  };
  let page;
  try {
    page = await browser.newPage();
    page.on('request', (r) => urls.push(r.url()));
    page.on('requestfailed', (r) => failedRequests.push(`${new Date().toISOString()} ${r.method()} ${r.url()}`
      + ` port=${r.headers()['e2b-sandbox-port'] || '-'}: ${r.failure()?.errorText}`));
    await page.setViewport({ width: 1280, height: 860 });
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('dialog', (d) => d.accept(d.type() === 'prompt' ? '900' : undefined));
    const shot = async (name) => {
      if (shots) await page.screenshot({ path: join(shots, `${name}.png`) });
    };
    const statusText = () => page.$eval('#status', (e) => e.textContent);

    // Sign-in: a wrong key is refused with the API's words; the right one is kept in
    // sessionStorage only (no cookie, not in the URL).
    await page.goto(`${daemon.baseUrl}/console/`);
    await page.waitForSelector('#api-key');
    await labelled('sign-in');
    await shot('sign-in');
    await page.type('#api-key', 'not-a-key');
    await page.click('.signin button[type=submit]');
    await page.waitForFunction(() => /Sign-in failed/.test(document.getElementById('status').textContent));
    assert.match(await statusText(), /invalid API key/);
    await page.$eval('#api-key', (e) => { e.value = ''; });
    await page.type('#api-key', key());
    await page.click('.signin button[type=submit]');
    await page.waitForSelector('#create');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('abx.apiKey')), key());
    assert.equal(await page.evaluate(() => document.cookie), '');
    assert.ok(!page.url().includes(key()));

    // Create a sandbox of the demo template (it serves the demo command module).
    await page.select('#create-template', 'demo');
    await page.click('#create');
    await page.waitForFunction(() => /Created \w+/.test(document.getElementById('status').textContent));
    const id = (await statusText()).match(/Created (\w+)/)[1];
    daemon.made.push(id);
    await page.waitForSelector(`.row[data-id="${id}"] [data-state="running"]`);
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === 'on', {},
      `.row[data-id="${id}"] [data-net]`);
    await labelled('sandboxes');
    await shot('sandboxes');
    // Readable at a phone's width: nothing wider than the screen.
    await page.setViewport({ width: 390, height: 844 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390),
      `page ${await page.evaluate(() => document.documentElement.scrollWidth)} px wide at 390`);
    await shot('phone');
    await page.setViewport({ width: 1280, height: 860 });

    // A command form: a bad argument is caught in the browser, the server's own check answers
    // when the browser's is skipped, and a good call shows the result.
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/commands`);
    await page.waitForSelector('form[data-command="demo"]');
    await page.type('#arg-demo-x', '4.2');
    await page.click('form[data-command="demo"] button[type=submit]');
    await page.waitForFunction(() => document.getElementById('arg-demo-x-err').textContent !== '');
    assert.equal(await page.$eval('#arg-demo-x-err', (e) => e.textContent), 'x must be an integer');
    assert.match(await page.$eval('#result-demo', (e) => e.textContent), /Not sent/);
    await page.click('#skip-demo');
    await page.click('form[data-command="demo"] button[type=submit]');
    await page.waitForSelector('#result-demo[data-status="400"]');
    assert.match(await page.$eval('#result-demo', (e) => e.textContent), /^400 InvalidArgument: .*x/);
    await page.click('#skip-demo');
    await page.$eval('#arg-demo-x', (e) => { e.value = ''; });
    await page.type('#arg-demo-x', '42');
    await page.$eval('#arg-demo-y', (e) => { e.value = ''; });
    await page.type('#arg-demo-y', 'world');
    await page.click('form[data-command="demo"] button[type=submit]');
    await page.waitForSelector('#result-demo[data-status="200"]');
    assert.equal(await page.$eval('#result-demo', (e) => e.textContent), 'result: "42: world"');
    assert.match(await page.$eval('#snippet-demo', (e) => e.textContent),
      new RegExp(`^abx run ${id} demo -a x=42 -a y=world$`, "m"));
    assert.match(await page.$eval("#snippet-demo", (e) => e.textContent),
      new RegExp(`^Sandbox.connect\\("${id}"\\).server.call\\("demo", x=42, y="world"\\)$`, "m"));
    await labelled('commands');
    await shot('commands');

    // Metrics over time, the network policy, a scoped token for one command.
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/metrics`);
    await page.waitForFunction(() => document.querySelectorAll('#metrics figure').length === 3,
      { timeout: 20000 });
    await shot('metrics');
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/network`);
    await page.waitForSelector('#network-policy');
    assert.match(await page.$eval('#network-policy', (e) => e.textContent), /Internetallowed/);
    await page.type('#net-deny', '10.0.0.0/8');
    await page.click('#network-edit button[type=submit]');
    await page.waitForFunction(() => /denyOut10\.0\.0\.0\/8/.test(document.getElementById('network-policy')?.textContent));
    await page.type('#net-deny', ', not a rule');
    await page.click('#network-edit button[type=submit]');
    await page.waitForFunction(() => /Replacing the network rules: 400: /.test(document.getElementById('status').textContent));
    await labelled('network');
    await shot('network');

    // Logs: abxd's events of the sandbox so far, then one that happens while the tab is open
    // (followed live), then the search and level filters.
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/logs`);
    await page.waitForFunction(() => /created from template 'demo'/.test(document.getElementById('logs')?.textContent)
      && /network rules replaced/.test(document.getElementById('logs').textContent));
    await labelled('logs');
    const timeoutSet = await fetch(`${daemon.baseUrl}/sandboxes/${id}/timeout`, { method: 'POST',
      headers: { 'X-API-Key': key(), 'Content-Type': 'application/json' }, body: JSON.stringify({ timeout: 600 }) });
    assert.equal(timeoutSet.status, 204);
    await page.waitForFunction(() => /timeout set: ends in 600 s/.test(document.getElementById('logs').textContent));
    await page.type('#log-search', 'TIMEOUT SET');
    await page.waitForFunction(() => /^1 of \d+ lines$/.test(document.getElementById('log-count').textContent));
    await page.$eval('#log-search', (e) => { e.value = 'timeout'; e.dispatchEvent(new Event('input')); });
    await shot('logs');
    await page.$eval('#log-search', (e) => { e.value = 'TIMEOUT SET'; e.dispatchEvent(new Event('input')); });
    await page.waitForFunction(() => /^1 of \d+ lines$/.test(document.getElementById('log-count').textContent));
    assert.match(await page.$eval('#logs', (e) => e.textContent), /^\S+ info \[abxd\] timeout set: ends in 600 s$/);
    await page.$eval('#log-search', (e) => { e.value = ''; e.dispatchEvent(new Event('input')); });
    await page.select('#log-level', 'error');
    await page.waitForFunction(() => /^0 of \d+ lines$/.test(document.getElementById('log-count').textContent));
    assert.equal(await page.$eval('#logs', (e) => e.textContent), '');
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/tokens`);
    await page.waitForSelector('#token-commands');
    await page.type('#token-commands', 'demo');
    await page.click('#panel form button[type=submit]');
    await page.waitForFunction(() => document.getElementById('token').textContent !== '');
    assert.match(await page.$eval('#token', (e) => e.textContent), /^abxs1\.\S+\nexpires /);
    await labelled('tokens');

    // Files: upload, view, download, delete.
    const local = join(downloads, 'hello-console.txt');
    writeFileSync(local, 'uploaded from the console\n');
    const dot = join(downloads, 'dot.png');
    writeFileSync(dot, PNG);
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/files`);
    await page.waitForSelector('#file-list tr[data-name=".bashrc"]');
    const input = await page.$('#upload');
    await input.uploadFile(local);
    await page.waitForSelector('#file-list tr[data-name="hello-console.txt"]');
    await page.click('#file-list tr[data-name="hello-console.txt"] td:first-child button');
    await page.waitForSelector('#file-content');
    assert.equal(await page.$eval('#file-content', (e) => e.textContent), 'uploaded from the console\n');
    const saved = join(downloads, 'saved');
    const cdp = await page.createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: saved });
    await page.click('#file-list tr[data-name="hello-console.txt"] [data-action="download"]');
    const file = join(saved, 'hello-console.txt');
    for (let i = 0; i < 100 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(readFileSync(file, 'utf8'), 'uploaded from the console\n');
    await shot('files');
    await page.click('#file-list tr[data-name="hello-console.txt"] [data-action="delete"]');
    await page.waitForFunction(() => !document.querySelector('#file-list tr[data-name="hello-console.txt"]'));
    await (await page.$('#upload')).uploadFile(dot);
    await page.waitForSelector('#file-list tr[data-name="dot.png"]');
    await page.click('#file-list tr[data-name="dot.png"] td:first-child button');
    await page.waitForFunction(() => document.querySelector('#viewer img')?.complete);
    assert.equal(await page.$eval('#viewer img', (i) => `${i.naturalWidth}x${i.naturalHeight}`), '1x1');
    await labelled('files');

    // Terminal: a real PTY; what is typed is echoed and run.
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/terminal`);
    if (!xtermEmbedded) {
      await page.waitForFunction(() => /built without @xterm\/xterm/.test(document.getElementById('panel').textContent));
    } else {
      await page.waitForSelector('#terminal[data-pid]');
      await page.waitForFunction(() => window.abxTerminal);
      await page.focus('#terminal textarea');
      await page.keyboard.type('echo abx-$((6*7))\n');
      await page.waitForFunction(() => {
        const b = window.abxTerminal.buffer.active;
        let text = '';
        for (let i = 0; i < b.length; i++) text += `${b.getLine(i).translateToString(true)}\n`;
        return /^abx-42$/m.test(text) && /echo abx-\$\(\(6\*7\)\)/.test(text);
      }, { timeout: 15000 });
      await shot('terminal');
    }

    // Pause, resume and kill from the list.
    await page.goto(`${daemon.baseUrl}/console/#/sandboxes`);
    const row = `.row[data-id="${id}"]`;
    await page.waitForSelector(`${row} [data-action="pause"]`);
    // Set timeout: the prompt is answered with 900 (the dialog handler above).
    await page.click(`${row} [data-action="timeout"]`);
    await page.waitForFunction((sid) => document.getElementById('status').textContent === `Setting the timeout of ${sid}: done`,
      {}, id);
    const endAt = (await (await fetch(`${daemon.baseUrl}/sandboxes/${id}`, { headers: { 'X-API-Key': key() } })).json()).endAt;
    const left = (Date.parse(endAt) - Date.now()) / 1000;
    assert.ok(left > 700 && left <= 900, `${left} s left after setting 900`);
    // Fork and snapshot need CRIU (scripts/install-criu.sh); without it the API's 409 is shown.
    await page.click(`${row} [data-action="fork"]`);
    if (!existsSync(criu)) {
      await page.waitForFunction((sid) => document.getElementById('status').textContent.startsWith(`Forking ${sid}: 409: `),
        { timeout: 30000 }, id);
    } else {
      await page.waitForFunction((sid) => new RegExp(`^Forked ${sid} into \\w+$`).test(document.getElementById('status').textContent),
        { timeout: 60000 }, id);
      const child = (await statusText()).split(' ').pop();
      daemon.made.push(child);
      await page.waitForSelector(`.row[data-id="${child}"] [data-state="running"]`);
      const killed = await fetch(`${daemon.baseUrl}/sandboxes/${child}`, { method: 'DELETE', headers: { 'X-API-Key': key() } });
      assert.equal(killed.status, 204);
      await page.click(`${row} [data-action="snapshot"]`);
      await page.waitForFunction((sid) => new RegExp(`^Snapshot snapshot-\\S+ of ${sid} `).test(document.getElementById('status').textContent),
        { timeout: 60000 }, id);
      const snap = (await statusText()).split(' ')[1];
      const snaps = await (await fetch(`${daemon.baseUrl}/snapshots?sandboxID=${id}`, { headers: { 'X-API-Key': key() } })).json();
      assert.deepEqual(snaps.map((x) => x.snapshotID), [snap]);
      const gone = await fetch(`${daemon.baseUrl}/templates/${snap}`, { method: 'DELETE', headers: { 'X-API-Key': key() } });
      assert.equal(gone.status, 204);
    }
    await page.waitForFunction((sel) => document.querySelectorAll(`${sel} svg.spark polyline`).length === 3,
      { timeout: 20000 }, row);  // CPU, memory and disk of the samples seen
    await page.click(`${row} [data-action="pause"]`);
    await page.waitForSelector(`${row} [data-state="paused"]`, { timeout: 30000 });
    await page.select('#state-filter', 'running');
    await page.waitForFunction((sel) => !document.querySelector(sel), {}, row);
    await page.select('#state-filter', 'paused');
    await page.waitForSelector(row);
    await page.select('#state-filter', '');
    await page.click(`${row} [data-action="resume"]`);
    await page.waitForSelector(`${row} [data-state="running"]`, { timeout: 30000 });
    await page.click(`${row} [data-action="kill"]`);
    await page.waitForFunction((sel) => !document.querySelector(sel), {}, row);
    const gone = await fetch(`${daemon.baseUrl}/sandboxes/${id}`, {
      headers: { 'X-API-Key': key() } });
    assert.equal(gone.status, 404);

    // The list is virtualised: with more sandboxes than fit, only the rows in view (and a few
    // around them) are in the page, and scrolling brings in the others.
    const many = 40;
    const headers = { 'X-API-Key': key(), 'Content-Type': 'application/json' };
    const made = [];
    for (let i = 0; i < many; i += 8) {
      made.push(...await Promise.all(Array.from({ length: Math.min(8, many - i) }, async () => {
        const r = await fetch(`${daemon.baseUrl}/sandboxes`, { method: 'POST', headers,
          body: JSON.stringify({ templateID: 'base', timeout: 300 }) });
        assert.equal(r.status, 201);
        const sid = (await r.json()).sandboxID;
        daemon.made.push(sid);
        return sid;
      })));
    }
    await page.waitForFunction((n) => document.getElementById('count').textContent === `${n} of ${n}`,
      { timeout: 20000 }, many);
    const inDom = await page.$$eval('#sandbox-list .row', (rs) => rs.length);
    assert.ok(inDom > 5 && inDom < many, `${inDom} rows in the page for ${many} sandboxes`);
    const last = await page.evaluate(async () => {
      const v = document.getElementById('sandbox-list');
      v.scrollTop = v.scrollHeight;
      // The list renders at the next frame after a scroll.
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const rs = [...v.querySelectorAll('.row')];
      return rs.reduce((a, r) => (parseFloat(r.style.top) > parseFloat(a.style.top) ? r : a)).dataset.id;
    });
    const listed = await (await fetch(
      `${daemon.baseUrl}/v2/sandboxes?state=running,paused&limit=100`, { headers })).json();
    assert.equal(listed.length, many);
    assert.equal(last, listed[listed.length - 1].sandboxID);
    for (const sid of made) {
      const r = await fetch(`${daemon.baseUrl}/sandboxes/${sid}`, { method: 'DELETE', headers });
      assert.equal(r.status, 204);
    }

    await page.goto(`${daemon.baseUrl}/console/#/templates`);
    await page.waitForSelector('#template-list a[href="#/templates/demo"]');
    await labelled('templates');
    await shot('templates');
    // One template's details: what the API says of it and of its image.
    const tmpl = await (await fetch(`${daemon.baseUrl}/templates/demo`, { headers })).json();
    const image = await (await fetch(`${daemon.baseUrl}/templates/demo/image`, { headers })).json();
    await page.click('#template-list a[href="#/templates/demo"]');
    await page.waitForSelector('#template-image');
    const details = await page.$eval('main', (e) => e.textContent);
    assert.ok(details.includes(`${image.manifestDigest}`), details);
    assert.ok(details.includes(`${image.layers.length} layers`), details);
    assert.ok(details.includes(`capabilities: ${(tmpl.capabilities || []).join(', ') || 'none'}`), details);
    for (const c of tmpl.customCommands || []) assert.ok(details.includes(c.name ?? JSON.stringify(c)), details);
    assert.ok(!await page.$('#delete-template'), 'a built-in template has no delete');
    await shot('template');

    assert.deepEqual(problems, []);
    assert.deepEqual(a11y, []);
    const k = key();
    assert.deepEqual(urls.filter((u) => u.includes(k) || u.includes(encodeURIComponent(k))), []);
    assert.ok(urls.length > 50, `${urls.length} requests seen`);
    assert.match(daemon.output, /listening on 127\.0\.0\.1:\d+/);  // the output was captured
    assert.ok(!daemon.output.includes(k), 'the API key is in abxd\'s output');
  } catch (e) {
    // What the page said, for the log of a failed run.
    const said = await page?.$eval('#status', (el) => el.textContent).catch(() => '?');
    const term = await page?.evaluate(() => {
      const b = window.abxTerminal?.buffer.active;
      let text = '';
      for (let i = 0; b && i < b.length; i++) text += `${b.getLine(i).translateToString(true)}\n`;
      return text.trim();
    }).catch(() => '?');
    e.message += `\n  terminal: ${term}`;
    const shown = await page?.$eval('#main', (el) => el.textContent.slice(0, 600)).catch(() => '?');
    e.message += `\n  console status line: ${said}\n  page problems: ${JSON.stringify(problems)}`;
    e.message += `\n  page text: ${shown}\n  failed requests: ${JSON.stringify(failedRequests, null, 1)}`;
    e.message += `\n  abxd's last output:\n${daemon.output.split('\n').slice(-40).join('\n')}`;
    throw e;
  } finally {
    await browser.close();
    rmSync(downloads, { recursive: true, force: true });
  }
});

test('the console runs a code-interpreter cell with a figure', {
  skip: !existsSync(chromium) && `no ${chromium} (scripts/install-deps.sh installs chromium)`,
}, async () => {
  const headers = { 'X-API-Key': key(), 'Content-Type': 'application/json' };
  const r = await fetch(`${daemon.baseUrl}/sandboxes`, { method: 'POST', headers,
    body: JSON.stringify({ templateID: 'code-interpreter', timeout: 300 }) });
  assert.equal(r.status, 201);
  const id = (await r.json()).sandboxID;
  daemon.made.push(id);
  const { default: puppeteer } = await import('puppeteer-core');
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 860 });
    await page.goto(`${daemon.baseUrl}/console/#/sandbox/${id}/code`);
    await page.waitForSelector('#api-key');
    await page.type('#api-key', key());
    await page.click('.signin button[type=submit]');
    await page.waitForSelector('#run-code');
    await page.click('#run-code');
    await page.waitForSelector('#code-output [data-done]', { timeout: 60000 });
    const out = await page.$$eval('#code-output pre', (ps) => ps.map((p) => `${p.className}: ${p.textContent}`));
    assert.ok(out.includes('stdout: 42\n'), JSON.stringify(out));
    const png = await page.$eval('#code-output img.figure', (img) => img.naturalWidth > 0 && img.src.startsWith('data:image/png;base64,'));
    assert.ok(png, 'the figure arrived as a PNG and decoded');
    if (shots) await page.screenshot({ path: join(shots, 'code.png') });
    await fetch(`${daemon.baseUrl}/sandboxes/${id}`, { method: 'DELETE', headers });
  } finally {
    await browser.close();
  }
});

test('the console builds a template from a Dockerfile and deletes it', {
  skip: !existsSync(chromium) && `no ${chromium} (scripts/install-deps.sh installs chromium)`,
}, async () => {
  // An abxd with an image store of its own: the build writes to it and the delete collects it,
  // which the shared store of the other tests must never see.
  const store = mkdtempSync(join(tmpdir(), 'abx-console-store-'));
  const env = { ...process.env };
  const own = await startAbxd('console-build', ['--image-store', store]);
  const ownKey = readFileSync(join(own.home, 'api_key'), 'utf8').trim();
  Object.assign(process.env, env);
  const { default: puppeteer } = await import('puppeteer-core');
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
  const ctxDir = mkdtempSync(join(tmpdir(), 'abx-console-ctx-'));
  try {
    const page = await browser.newPage();
    page.on('dialog', (d) => d.accept());
    await page.goto(`${own.baseUrl}/console/#/templates`);
    await page.waitForSelector('#api-key');
    await page.type('#api-key', ownKey);
    await page.click('.signin button[type=submit]');
    await page.waitForSelector('#build');
    const hello = join(ctxDir, 'hello.txt');
    writeFileSync(hello, 'hello from the context\n');
    await page.type('#build-name', 'console-built');
    await page.$eval('#build-dockerfile', (e) => { e.value = 'FROM scratch\nCOPY hello.txt /hello.txt\nENV A=1\n'; });
    await (await page.$('#build-files')).uploadFile(hello);
    await page.click('#build');
    await page.waitForFunction(() => /^(done|error):/m.test(document.getElementById('build-log').textContent),
      { timeout: 60000 });
    const log = await page.$eval('#build-log', (e) => e.textContent);
    assert.match(log, /Step 2\/3: COPY hello.txt \/hello.txt/);
    assert.match(log, /^done: console-built, 3 steps/m);
    const headers = { 'X-API-Key': ownKey };
    assert.equal((await fetch(`${own.baseUrl}/templates/console-built`, { headers })).status, 200);
    await page.goto(`${own.baseUrl}/console/#/templates/console-built`);
    await page.waitForSelector('#delete-template');
    await page.click('#delete-template');
    await page.waitForSelector('#template-list');
    assert.equal((await fetch(`${own.baseUrl}/templates/console-built`, { headers })).status, 404);
  } finally {
    await browser.close();
    await own.stop();
    rmSync(store, { recursive: true, force: true });
    rmSync(ctxDir, { recursive: true, force: true });
  }
});
