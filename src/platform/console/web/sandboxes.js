// The sandboxes page: a live, virtualised list (only the rows in view are in the DOM, so 500
// or more stay smooth) with each row's actions, and the create form.
import { api } from './api.js';
import { act, age, bytes, duration, h, status } from './ui.js';

const REFRESH_MS = 3000;

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

function rowHeight() { return matchMedia('(max-width: 760px)').matches ? 120 : 40; }

export async function sandboxesPage(main) {
  const templates = (await api('GET', '/templates')).data;
  let rows = [];
  let metrics = {};
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

  const search = h('input', { id: 'filter', type: 'search', placeholder: 'id, template or state',
    oninput: () => { filter = search.value.trim().toLowerCase(); render(); } });
  const count = h('span', { class: 'hint', id: 'count' });
  const head = h('div', { class: 'grid-head', role: 'row' },
    ['Sandbox', 'State', 'Template', 'Age', 'Time left', 'CPU / mem', 'Actions']
      .map((c) => h('span', { role: 'columnheader' }, c)));
  const spacer = h('div', { class: 'spacer' });
  const viewport = h('div', { class: 'viewport', id: 'sandbox-list', role: 'rowgroup',
    tabindex: '0', onscroll: () => render() }, spacer);

  main.replaceChildren(h('h1', {}, 'Sandboxes'), createForm,
    h('div', { class: 'inline' }, h('label', { for: 'filter' }, 'Filter '), search, ' ', count),
    h('div', { role: 'table', 'aria-label': 'Sandboxes' }, head, viewport));

  function visible() {
    if (!filter) return rows;
    return rows.filter((r) => `${r.sandboxID} ${r.templateID} ${r.state}`.toLowerCase().includes(filter));
  }

  function actions(r) {
    const id = r.sandboxID;
    const path = `/sandboxes/${encodeURIComponent(id)}`;
    const run = (what, fn) => act(`${what} ${id}`, fn).then(refresh, () => {});
    const btns = [h('a', { href: `#/sandbox/${encodeURIComponent(id)}` }, 'Open')];
    if (r.state === 'paused') {
      btns.push(h('button', { type: 'button', dataset: { action: 'resume' },
        onclick: () => run('Resuming', () => api('POST', `${path}/resume`, {})) }, 'Resume'));
    } else {
      btns.push(h('button', { type: 'button', dataset: { action: 'pause' },
        onclick: () => run('Pausing', () => api('POST', `${path}/pause`)) }, 'Pause'));
    }
    btns.push(h('button', { type: 'button', dataset: { action: 'timeout' }, onclick: () => {
      const v = prompt(`New timeout for ${id}, in seconds from now`, '300');
      if (v !== null) run('Setting the timeout of', () => api('POST', `${path}/timeout`, { timeout: Number(v) }));
    } }, 'Timeout'));
    btns.push(h('button', { type: 'button', class: 'danger', dataset: { action: 'kill' },
      onclick: () => { if (confirm(`Kill ${id}?`)) run('Killing', () => api('DELETE', path)); } },
    'Kill'));
    return h('span', { class: 'actions' }, btns);
  }

  function render() {
    const list = visible();
    const rh = rowHeight();
    count.textContent = `${list.length} of ${rows.length}`;
    spacer.style.height = `${list.length * rh}px`;
    const first = Math.max(0, Math.floor(viewport.scrollTop / rh) - 5);
    const last = Math.min(list.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / rh) + 5);
    const out = [];
    for (let i = first; i < last; i++) {
      const r = list[i];
      const m = metrics[r.sandboxID];
      const left = Math.round((Date.parse(r.endAt) - Date.now()) / 1000);
      const row = h('div', { class: 'row', role: 'row', dataset: { id: r.sandboxID } },
        h('span', { class: 'mono', role: 'cell' }, r.sandboxID),
        h('span', { role: 'cell', dataset: { state: r.state } }, r.state),
        h('span', { role: 'cell' }, r.templateID),
        h('span', { role: 'cell' }, age(r.startedAt)),
        h('span', { role: 'cell' }, r.state === 'paused' ? '—' : left > 0 ? duration(left) : 'ending'),
        h('span', { role: 'cell' }, m ? `${m.cpuUsedPct.toFixed(0)}% · ${bytes(m.memUsed)}` : '—'),
        h('span', { role: 'cell' }, actions(r)));
      row.style.top = `${i * rh}px`;
      out.push(row);
    }
    spacer.replaceChildren(...out);
  }

  let timer = 0;
  let stopped = false;
  async function refresh() {
    clearTimeout(timer);
    try {
      rows = await listAll();
      const running = rows.filter((r) => r.state === 'running').map((r) => r.sandboxID);
      metrics = running.length ? await metricsOf(running) : {};
      render();
    } catch (e) {
      status(`Listing sandboxes: ${e.message}`, 'error');
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }
  await refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
