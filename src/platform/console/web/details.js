// A sandbox's other tabs: metrics as charts over time, its network policy and egress audit,
// and scoped command tokens.
import { api } from './api.js';
import { act, bytes, h } from './ui.js';

const NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

// A line chart of `points` ([t ms, 0–100]) over [t0, t1], with its label and latest value.
function chart(title, points, t0, t1, latest) {
  const W = 600;
  const H = 120;
  const span = Math.max(1, t1 - t0);
  const box = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
    'aria-label': `${title}: ${latest}` });
  for (const y of [0, 50, 100]) {
    box.append(svg('line', { x1: 0, x2: W, y1: H - (y / 100) * H, y2: H - (y / 100) * H, class: 'grid' }));
  }
  box.append(svg('polyline', { points: points.map(([t, v]) =>
    `${(((t - t0) / span) * W).toFixed(1)},${(H - (Math.min(100, Math.max(0, v)) / 100) * H).toFixed(1)}`).join(' ') }));
  return h('figure', { class: 'card' }, h('figcaption', {}, `${title} — ${latest}`), box);
}

export async function metricsTab(panel, id) {
  let timer = 0;
  const draw = async () => {
    try {
      const { data } = await api('GET', `/sandboxes/${encodeURIComponent(id)}/metrics`);
      if (!data.length) {
        panel.replaceChildren(h('p', { class: 'hint', id: 'metrics' }, 'No samples yet.'));
      } else {
        const ts = data.map((m) => Date.parse(m.timestamp));
        const t0 = ts[0];
        const t1 = ts[ts.length - 1];
        const last = data[data.length - 1];
        panel.replaceChildren(h('div', { id: 'metrics' },
          h('p', { class: 'hint' }, `${data.length} samples since ${data[0].timestamp}`),
          chart('CPU', data.map((m, i) => [ts[i], m.cpuUsedPct]), t0, t1,
            `${last.cpuUsedPct.toFixed(1)}% of ${last.cpuCount} CPU`),
          chart('Memory', data.map((m, i) => [ts[i], (100 * m.memUsed) / m.memTotal]), t0, t1,
            `${bytes(last.memUsed)} of ${bytes(last.memTotal)}`),
          chart('Disk', data.map((m, i) => [ts[i], (100 * m.diskUsed) / m.diskTotal]), t0, t1,
            `${bytes(last.diskUsed)} of ${bytes(last.diskTotal)}`)));
      }
    } catch (e) {
      panel.replaceChildren(h('p', { class: 'error' }, e.message));
    }
    timer = setTimeout(draw, 5000);
  };
  await draw();
  return () => clearTimeout(timer);
}

// PUT /sandboxes/{id}/network: the new rules replace the old ones (docs/networking.md).
function editForm(id, sb, net, panel) {
  const list = (text) => text.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);
  const internet = h('input', { id: 'net-internet', type: 'checkbox', checked: !!sb.allowInternetAccess });
  const allow = h('input', { id: 'net-allow', type: 'text', class: 'mono', value: (net.allowOut || []).join(', '),
    placeholder: 'e.g. pypi.org, 1.1.1.1, 10.0.0.0/8' });
  const deny = h('input', { id: 'net-deny', type: 'text', class: 'mono', value: (net.denyOut || []).join(', ') });
  return h('form', { class: 'card', id: 'network-edit', onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { allowInternetAccess: internet.checked, allowOut: list(allow.value), denyOut: list(deny.value) };
    const ok = await act('Replacing the network rules', () => api('PUT', `/sandboxes/${encodeURIComponent(id)}/network`, body))
      .then(() => true, () => false);
    if (ok) networkTab(panel, id);
  } },
  h('h2', {}, 'Change the rules'),
  h('label', { for: 'net-internet' }, internet, ' internet'),
  h('label', { for: 'net-allow' }, 'allowOut (domains, IPs, CIDRs)'), allow,
  h('label', { for: 'net-deny' }, 'denyOut'), deny,
  h('p', {}, h('button', { type: 'submit' }, 'Replace the rules')));
}

export async function networkTab(panel, id) {
  const { data: sb } = await api('GET', `/sandboxes/${encodeURIComponent(id)}`);
  const audit = await api('GET', `/sandboxes/${encodeURIComponent(id)}/network/audit`)
    .then((r) => r.data.events || [], (e) => e);
  const net = sb.network || {};
  panel.replaceChildren(
    h('h2', {}, 'Policy'),
    sb.allowInternetAccess === undefined || sb.allowInternetAccess === null
      ? h('p', {}, 'This abxd runs sandboxes without networking (loopback only).')
      : h('dl', { id: 'network-policy' },
        h('dt', {}, 'Internet'), h('dd', {}, sb.allowInternetAccess ? 'allowed' : 'off'),
        h('dt', {}, 'allowOut'), h('dd', { class: 'mono' }, (net.allowOut || []).join(', ') || '—'),
        h('dt', {}, 'denyOut'), h('dd', { class: 'mono' }, (net.denyOut || []).join(', ') || '—'),
        h('dt', {}, 'Public traffic'), h('dd', {}, net.allowPublicTraffic === false ? 'token required' : 'open')),
    sb.allowInternetAccess === undefined || sb.allowInternetAccess === null ? null : editForm(id, sb, net, panel),
    h('h2', {}, 'Egress audit'),
    audit instanceof Error ? h('p', { class: 'error' }, audit.message)
      : audit.length === 0 ? h('p', { class: 'hint' }, 'No outbound connections yet.')
        : h('table', { id: 'audit' },
          h('tr', {}, ['Time', 'Verdict', 'Protocol', 'Destination', 'Domain'].map((c) => h('th', {}, c))),
          audit.slice(-500).reverse().map((e) => h('tr', {},
            h('td', {}, new Date(e.timestamp).toISOString()), h('td', {}, e.verdict), h('td', {}, e.protocol),
            h('td', { class: 'mono' }, `${e.destination}${e.port ? `:${e.port}` : ''}`), h('td', {}, e.domain || '')))));
  return null;
}

export async function tokensTab(panel, id) {
  const commands = h('input', { id: 'token-commands', type: 'text', placeholder: 'demo, add', required: true });
  const ttl = h('input', { id: 'token-ttl', type: 'number', min: '1', value: '3600' });
  const out = h('pre', { id: 'token', 'aria-live': 'polite' });
  panel.replaceChildren(
    h('p', {}, 'A scoped token reaches only the listed commands of this sandbox\'s command server ',
      '(send it as X-Access-Token). It cannot be revoked: keep its lifetime short.'),
    h('form', { class: 'inline', onsubmit: async (ev) => {
      ev.preventDefault();
      const list = commands.value.split(',').map((s) => s.trim()).filter(Boolean);
      const r = await act('Minting a token', () => api('POST', `/sandboxes/${encodeURIComponent(id)}/tokens`,
        { commands: list, ttlSeconds: Number(ttl.value) })).catch(() => null);
      if (r) out.textContent = `${r.data.token}\nexpires ${r.data.expiresAt}`;
    } },
    h('div', {}, h('label', { for: 'token-commands' }, 'Commands'), commands),
    h('div', {}, h('label', { for: 'token-ttl' }, 'Lifetime (s)'), ttl),
    h('button', { type: 'submit' }, 'Mint')),
    out);
  return null;
}
