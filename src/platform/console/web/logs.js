// The Logs tab: GET /v2/sandboxes/{id}/logs followed live (asked again every second from the
// last entry's time on), filtered in the page by level and a search text as you type.
import { api } from './api.js';
import { h } from './ui.js';

const POLL_MS = 1000;
const KEEP = 5000;  // lines kept in the page
const LEVELS = ['debug', 'info', 'warn', 'error'];

export async function logsTab(panel, id) {
  const search = h('input', { id: 'log-search', type: 'search', placeholder: 'text in the line' });
  const level = h('select', { id: 'log-level' },
    LEVELS.map((l) => h('option', { value: l }, l === 'debug' ? 'all' : `${l} and above`)));
  const count = h('span', { class: 'hint', id: 'log-count', 'aria-live': 'polite' });
  const out = h('pre', { class: 'logs', id: 'logs', tabindex: '0', 'aria-label': 'Log lines' });
  let entries = [];
  // The cursor is inclusive: the entries already shown at the cursor's millisecond are skipped
  // when asked again, so a line logged later in that same millisecond is not lost.
  let cursor = 0;
  let atCursor = new Set();

  const show = () => {
    const q = search.value.toLowerCase();
    const min = LEVELS.indexOf(level.value);
    const shown = entries.filter((e) => (LEVELS.indexOf(e.level) < 0 || LEVELS.indexOf(e.level) >= min)
      && (!q || e.text.toLowerCase().includes(q)));
    const follow = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.textContent = shown.map((e) => e.text).join('\n');
    count.textContent = `${shown.length} of ${entries.length} lines`;
    if (follow) out.scrollTop = out.scrollHeight;
  };
  search.addEventListener('input', show);
  level.addEventListener('change', show);
  panel.replaceChildren(
    h('form', { class: 'inline', role: 'search', onsubmit: (ev) => ev.preventDefault() },
      h('div', {}, h('label', { for: 'log-search' }, 'Search'), search),
      h('div', {}, h('label', { for: 'log-level' }, 'Level'), level), count),
    out);

  let timer = 0;
  let stopped = false;
  const poll = async () => {
    try {
      const q = new URLSearchParams({ cursor: String(cursor), limit: '1000' });
      const { data } = await api('GET', `/v2/sandboxes/${encodeURIComponent(id)}/logs?${q}`);
      let added = 0;
      for (const e of data.logs || []) {
        const ms = Date.parse(e.timestamp);
        const key = `${e.timestamp}\u0000${e.level}\u0000${e.message}`;
        if (ms === cursor && atCursor.has(key)) continue;
        if (ms > cursor) { cursor = ms; atCursor = new Set(); }
        atCursor.add(key);
        const source = e.fields && e.fields.source ? ` [${e.fields.source}]` : '';
        entries.push({ level: e.level, text: `${e.timestamp} ${e.level}${source} ${e.message}` });
        added++;
      }
      if (entries.length > KEEP) entries = entries.slice(-KEEP);
      if (added || !out.dataset.loaded) show();
      out.dataset.loaded = '1';
      out.classList.remove('error');
    } catch (e) {
      out.textContent = e.message;
      out.classList.add('error');
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  };
  await poll();
  return () => { stopped = true; clearTimeout(timer); };
}
