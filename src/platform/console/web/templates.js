// Templates: the list, a build from a Dockerfile with its progress streamed, and one
// template's details (capabilities, commands, image) with delete for built ones.
import { api, apiKey, ApiError, readNdjson } from './api.js';
import { act, bytes, h, status } from './ui.js';
import { tar } from './tar.js';

// POST /templates/build: the context as a tar; the answer is NDJSON progress, shown as it comes.
async function build(name, dockerfile, extra, log) {
  const files = [{ name: 'Dockerfile', data: new TextEncoder().encode(dockerfile) }];
  for (const f of extra) files.push({ name: f.name, data: new Uint8Array(await f.arrayBuffer()) });
  const q = new URLSearchParams({ name, dockerfile: 'Dockerfile' });
  const res = await fetch(`/templates/build?${q}`, {
    method: 'POST', body: tar(files), cache: 'no-store', credentials: 'omit',
    headers: { 'X-API-Key': apiKey(), 'Content-Type': 'application/x-tar' },
  });
  if (!res.ok) {
    const j = await res.json().catch(() => ({}));
    throw new ApiError(res.status, `${res.status}: ${j.message || res.statusText}`);
  }
  let last = null;
  await readNdjson(res, (ev, line) => {
    last = ev;
    if (ev.type === 'step') log(`Step ${ev.step}/${ev.total}: ${ev.instruction}${ev.cached ? ' (cached)' : ''}`);
    else if (ev.type === 'layer') log(`  -> layer of ${bytes(ev.bytes)}`);
    else if (ev.type === 'log') log(ev.line);
    else if (ev.type === 'done') log(`done: ${ev.template.templateID}, ${ev.steps} steps, ${bytes(ev.template.size)}`);
    else if (ev.type === 'error') log(`error: ${ev.message}`);
    else log(line);
  });
  if (!last || last.type !== 'done') {
    throw new ApiError(0, last && last.type === 'error' ? last.message : 'the build ended without a result');
  }
  return last;
}

export async function templatesPage(main) {
  const { data } = await api('GET', '/templates');
  const name = h('input', { id: 'build-name', type: 'text', required: true });
  const dockerfile = h('textarea', { id: 'build-dockerfile', rows: '6', cols: '60', class: 'mono',
    spellcheck: 'false' });
  dockerfile.value = 'FROM base\nENV GREETING=hello\n';
  const extra = h('input', { id: 'build-files', type: 'file', multiple: true });
  const log = h('pre', { id: 'build-log', class: 'logs', 'aria-live': 'polite' });
  const form = h('form', { class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    log.textContent = '';
    const append = (line) => { log.textContent += `${line}\n`; log.scrollTop = log.scrollHeight; };
    const done = await act(`Building ${name.value}`, () => build(name.value, dockerfile.value,
      [...extra.files], append)).catch(() => null);
    if (done) { status(`Built ${done.template.templateID}`, 'ok'); }
  } },
  h('h2', {}, 'Build from a Dockerfile'),
  h('label', { for: 'build-name' }, 'Name'), name,
  h('label', { for: 'build-dockerfile' }, 'Dockerfile'), dockerfile,
  h('label', { for: 'build-files' }, 'Context files (beside the Dockerfile)'), extra,
  h('p', {}, h('button', { type: 'submit', id: 'build' }, 'Build')), log);

  main.replaceChildren(h('h1', {}, 'Templates'),
    h('table', { id: 'template-list' },
      h('tr', {}, h('th', {}, 'Template'), h('th', {}, 'Capabilities'), h('th', {}, 'CPU / memory')),
      data.map((t) => h('tr', {},
        h('td', {}, h('a', { href: `#/templates/${encodeURIComponent(t.templateID)}` }, t.templateID)),
        h('td', {}, (t.capabilities || []).join(', ')),
        h('td', {}, `${t.cpuCount ?? ''} / ${t.memoryMB ?? ''} MiB`)))),
    form);
  return null;
}

export async function templatePage(main, id) {
  const { data: t } = await api('GET', `/templates/${encodeURIComponent(id)}`);
  const image = await api('GET', `/templates/${encodeURIComponent(id)}/image`).then((r) => r.data,
    (e) => ({ error: e.message }));
  const commands = t.customCommands || [];
  main.replaceChildren(
    h('p', {}, h('a', { href: '#/templates' }, '← Templates')),
    h('h1', {}, 'Template ', h('span', { class: 'mono' }, id)),
    h('p', {}, `capabilities: ${(t.capabilities || []).join(', ') || 'none'}`),
    h('h2', {}, 'Custom commands'),
    commands.length ? h('ul', {}, commands.map((c) => h('li', {}, h('code', {}, c.name ?? JSON.stringify(c)),
      c.description ? ` — ${c.description}` : ''))) : h('p', { class: 'hint' }, 'none'),
    h('h2', {}, 'Image'),
    image.error ? h('p', { class: 'hint' }, image.error)
      : h('div', { id: 'template-image' },
        h('p', {}, `digest ${image.manifestDigest} · ${bytes(image.size)} · ${image.layers.length} layers`),
        h('ul', {}, image.layers.map((l) => h('li', { class: 'mono' }, `${l.digest ?? ''} ${bytes(l.size)}`)))),
    image.built ? h('p', {}, h('button', { type: 'button', class: 'danger', id: 'delete-template',
      onclick: async () => {
        if (!confirm(`Delete template ${id}?`)) return;
        const ok = await act(`Deleting template ${id}`,
          () => api('DELETE', `/templates/${encodeURIComponent(id)}`)).then(() => true, () => false);
        if (ok) location.hash = '#/templates';
      } }, 'Delete this template')) : null,
    h('details', {}, h('summary', {}, 'Raw JSON'), h('pre', {}, JSON.stringify(t, null, 2))));
  return null;
}
