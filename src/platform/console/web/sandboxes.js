// The sandboxes page: a live, virtualised list (only the rows in view are in the DOM, so 500
// or more stay smooth) with each row's actions, and the create form.
import { api } from './api.js';
import { act, age, bytes, duration, h, status } from './ui.js';

const REFRESH_MS = 3000;
const HISTORY = 30;  // samples per sandbox kept for its sparkline

// A sparkline of `values` (0–100) as an inline SVG, built with the DOM (CSP allows it).
function sparkline(values, label) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${HISTORY - 1} 100`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const line = document.createElementNS(ns, 'polyline');
  const off = HISTORY - values.length;
  line.setAttribute('points', values.map((v, i) => `${off + i},${100 - Math.min(100, Math.max(0, v))}`).join(' '));
  svg.append(line);
  return svg;
}

async function listAll() {
  const out = [];
  let next = '';
  for (let page = 0; page < 50; page++) {  // at most 5000 sandboxes
    const q = new URLSearchParams({ state: 'running,paused', limit: '100' });
    if (next) q.set('nextToken', next);
    const { data, headers } = await api('GET', `/v2/sandboxes?${q}`);
    out.push(...data);
    next = headers.get('X-Next-Token') || '';
    if (!next) break;
  }
  return out;
}

async function metricsOf(ids) {
  const out = {};
  for (let i = 0; i < ids.length; i += 100) {
    const q = new URLSearchParams({ sandbox_ids: ids.slice(i, i + 100).join(',') });
    const { data } = await api('GET', `/sandboxes/metrics?${q}`);
    Object.assign(out, data.sandboxes || {});
  }
  return out;
}

function rowHeight() { return matchMedia('(max-width: 760px)').matches ? 160 : 40; }

export async function sandboxesPage(main) {
  const templates = (await api('GET', '/templates')).data;
  let rows = [];
  let metrics = {};
  const history = new Map();  // id -> { cpu: [%], mem: [%], disk: [%] } of recent samples
  const details = new Map();  // id -> GET /sandboxes/{id} (fetched for rows in view only)
  const asked = new Set();
  let filter = '';

  const tmplSelect = h('select', { id: 'create-template' },
    templates.map((t) => h('option', { value: t.templateID }, t.templateID)));
  const timeout = h('input', { id: 'create-timeout', type: 'number', min: '1', value: '300',
    inputmode: 'numeric' });
  const internet = h('input', { id: 'create-internet', type: 'checkbox', checked: true });
  const createForm = h('form', { class: 'inline card', 'aria-label': 'Create a sandbox',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { templateID: tmplSelect.value, timeout: Number(timeout.value),
        allowInternetAccess: internet.checked };
      const { data } = await act(`Creating a ${body.templateID} sandbox`,
        () => api('POST', '/sandboxes', body)).catch(() => ({}));
      if (data) { status(`Created ${data.sandboxID}`, 'ok'); refresh(); }
    } },
  h('div', {}, h('label', { for: 'create-template' }, 'Template'), tmplSelect),
  h('div', {}, h('label', { for: 'create-timeout' }, 'Timeout (s)'), timeout),
  h('div', {}, h('label', { for: 'create-internet' }, 'Internet'), internet),
  h('button', { type: 'submit', id: 'create' }, 'Create'));

  const search = h('input', { id: 'filter', type: 'search', placeholder: 'id, template or metadata',
    oninput: () => { filter = search.value.trim().toLowerCase(); schedule(); } });
  const stateFilter = h('select', { id: 'state-filter', onchange: () => schedule() },
    h('option', { value: '' }, 'any state'), h('option', { value: 'running' }, 'running'),
    h('option', { value: 'paused' }, 'paused'));
  const count = h('span', { class: 'hint', id: 'count' });
  const head = h('div', { class: 'grid-head', role: 'row' },
    ['Sandbox', 'State', 'Template', 'Age', 'Time left', 'Net', 'CPU / mem / disk', 'Actions']
      .map((c) => h('span', { role: 'columnheader' }, c)));
  const spacer = h('div', { class: 'spacer' });
  const viewport = h('div', { class: 'viewport', id: 'sandbox-list', role: 'rowgroup',
    tabindex: '0', onscroll: () => schedule() }, spacer);

  main.replaceChildren(h('h1', {}, 'Sandboxes'), createForm,
    h('div', { class: 'inline' }, h('label', { for: 'filter' }, 'Filter '), search, ' ',
      h('label', { for: 'state-filter', class: 'visually-hidden' }, 'State'), stateFilter, ' ', count),
    h('div', { role: 'table', 'aria-label': 'Sandboxes' }, head, viewport));

  function visible() {
    const state = stateFilter.value;
    if (!filter && !state) return rows;
    return rows.filter((r) => (!state || r.state === state) && (!filter ||
      `${r.sandboxID} ${r.templateID} ${JSON.stringify(r.metadata || {})}`.toLowerCase().includes(filter)));
  }

  function actions(r) {
    const id = r.sandboxID;
    const path = `/sandboxes/${encodeURIComponent(id)}`;
    // An action's function may return a function that reports its outcome after act's "done".
    const run = (what, fn) => act(`${what} ${id}`, fn).then((after) => {
      if (typeof after === 'function') after();
      return refresh();
    }, () => {});
    const btns = [h('a', { href: `#/sandbox/${encodeURIComponent(id)}` }, 'Open')];
    if (r.state === 'paused') {
      btns.push(h('button', { type: 'button', dataset: { action: 'resume' },
        onclick: () => run('Resuming', () => api('POST', `${path}/resume`, {})) }, 'Resume'));
    } else {
      btns.push(h('button', { type: 'button', dataset: { action: 'pause' },
        onclick: () => run('Pausing', () => api('POST', `${path}/pause`)) }, 'Pause'));
    }
    // Fork and snapshot say what they made (or the child's own error) once they are done.
    btns.push(h('button', { type: 'button', dataset: { action: 'fork' }, onclick: () => run('Forking', async () => {
      const { data } = await api('POST', `${path}/fork`, {});
      const child = (data || [])[0] || {};
      if (child.error) throw new Error(`the child failed: ${child.error.message}`);
      return () => status(`Forked ${id} into ${child.sandbox.sandboxID}`, 'ok');
    }) }, 'Fork'));
    btns.push(h('button', { type: 'button', dataset: { action: 'snapshot' }, onclick: () => run('Snapshotting', async () => {
      const { data } = await api('POST', `${path}/snapshots`, {});
      return () => status(`Snapshot ${data.snapshotID} of ${id} (a template: create sandboxes from it)`, 'ok');
    }) }, 'Snapshot'));
    btns.push(h('button', { type: 'button', dataset: { action: 'timeout' }, onclick: () => {
      const v = prompt(`New timeout for ${id}, in seconds from now`, '300');
      if (v !== null) run('Setting the timeout of', () => api('POST', `${path}/timeout`, { timeout: Number(v) }));
    } }, 'Timeout'));
    btns.push(h('button', { type: 'button', class: 'danger', dataset: { action: 'kill' },
      onclick: () => { if (confirm(`Kill ${id}?`)) run('Killing', () => api('DELETE', path)); } },
    'Kill'));
    return h('span', { class: 'actions' }, btns);
  }

  // Whether a sandbox has internet: the list does not say, its details do. Asked once per
  // sandbox, and only for rows scrolled into view.
  function network(id) {
    const d = details.get(id);
    if (!d) {
      if (!asked.has(id)) {
        asked.add(id);
        api('GET', `/sandboxes/${encodeURIComponent(id)}`).then(({ data }) => {
          details.set(id, data);
          schedule();
        }, () => {});
      }
      return '…';
    }
    if (d.allowInternetAccess === undefined || d.allowInternetAccess === null) return 'none';
    return d.allowInternetAccess ? 'on' : 'off';
  }

  const shown = new Map();  // id -> the row in the page: { el, cells, state, rh, gen, top }
  let generation = 0;  // refreshes so far: a row's sparklines are redrawn once per refresh
  const text = (el, t) => { if (el.textContent !== t) el.textContent = t; };

  // Scrolling, typing and answers arriving ask for a render; it happens once, at the next frame.
  let frame = 0;
  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function render() {
    if (frame) { cancelAnimationFrame(frame); frame = 0; }
    const list = visible();
    const rh = rowHeight();
    count.textContent = `${list.length} of ${rows.length}`;
    spacer.style.height = `${list.length * rh}px`;
    const first = Math.max(0, Math.floor(viewport.scrollTop / rh) - 5);
    const last = Math.min(list.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / rh) + 5);
    // Rows are kept per sandbox while they stay in view: a render only moves them, changes the
    // texts that changed and redraws sparklines after a refresh. A row is built anew when it
    // comes into view or its state (and so its actions) changes.
    const keep = new Set();
    for (let i = first; i < last; i++) {
      const r = list[i];
      const id = r.sandboxID;
      keep.add(id);
      let s = shown.get(id);
      if (!s || s.state !== r.state || s.rh !== rh) {
        const cells = {
          age: h('span', { role: 'cell' }), left: h('span', { role: 'cell' }),
          net: h('span', { role: 'cell', dataset: { net: '' } }), usage: h('span'),
          sparks: h('span', { class: 'sparks' }),
        };
        const el = h('div', { class: 'row', role: 'row', dataset: { id } },
          h('span', { class: 'mono', role: 'cell' }, id),
          h('span', { role: 'cell', dataset: { state: r.state } }, r.state),
          h('span', { role: 'cell' }, r.templateID),
          cells.age, cells.left, cells.net,
          h('span', { role: 'cell', class: 'usage' }, cells.usage, cells.sparks),
          h('span', { role: 'cell' }, actions(r)));
        if (s) s.el.replaceWith(el); else spacer.append(el);
        s = { el, cells, state: r.state, rh, gen: -1, top: '' };
        shown.set(id, s);
      }
      const m = metrics[id];
      const left = Math.round((Date.parse(r.endAt) - Date.now()) / 1000);
      text(s.cells.age, age(r.startedAt));
      text(s.cells.left, r.state === 'paused' ? '—' : left > 0 ? duration(left) : 'ending');
      text(s.cells.net, network(id));
      text(s.cells.usage, m ? `${m.cpuUsedPct.toFixed(0)}% · ${bytes(m.memUsed)}` : '—');
      const hs = history.get(id);
      if (hs && s.gen !== generation) {
        s.gen = generation;
        s.cells.sparks.replaceChildren(sparkline(hs.cpu, `CPU of ${id}`),
          sparkline(hs.mem, `memory of ${id}`), sparkline(hs.disk, `disk of ${id}`));
      }
      const top = `${i * rh}px`;
      if (s.top !== top) { s.el.style.top = top; s.top = top; }
    }
    for (const [id, s] of shown) {
      if (!keep.has(id)) { s.el.remove(); shown.delete(id); }
    }
  }

  let timer = 0;
  let stopped = false;
  async function refresh() {
    clearTimeout(timer);
    try {
      rows = await listAll();
      const running = rows.filter((r) => r.state === 'running').map((r) => r.sandboxID);
      metrics = running.length ? await metricsOf(running) : {};
      const live = new Set(rows.map((r) => r.sandboxID));
      for (const id of history.keys()) if (!live.has(id)) history.delete(id);
      for (const [id, m] of Object.entries(metrics)) {
        const hs = history.get(id) || { cpu: [], mem: [], disk: [] };
        hs.cpu.push(m.cpuUsedPct);
        hs.mem.push(m.memTotal ? (100 * m.memUsed) / m.memTotal : 0);
        hs.disk.push(m.diskTotal ? (100 * m.diskUsed) / m.diskTotal : 0);
        for (const k of ['cpu', 'mem', 'disk']) if (hs[k].length > HISTORY) hs[k].shift();
        history.set(id, hs);
      }
      generation++;
      render();
    } catch (e) {
      status(`Listing sandboxes: ${e.message}`, 'error');
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }
  await refresh();
  return () => { stopped = true; clearTimeout(timer); cancelAnimationFrame(frame); };
}
