// Templates: the list and one template's details (capabilities, commands, image).
import { api } from './api.js';
import { bytes, h } from './ui.js';

export async function templatesPage(main) {
  const { data } = await api('GET', '/templates');
  main.replaceChildren(h('h1', {}, 'Templates'),
    h('table', { id: 'template-list' },
      h('tr', {}, h('th', {}, 'Template'), h('th', {}, 'Capabilities'), h('th', {}, 'CPU / memory')),
      data.map((t) => h('tr', {},
        h('td', {}, h('a', { href: `#/templates/${encodeURIComponent(t.templateID)}` }, t.templateID)),
        h('td', {}, (t.capabilities || []).join(', ')),
        h('td', {}, `${t.cpuCount ?? ''} / ${t.memoryMB ?? ''} MiB`)))));
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
      : h('div', {}, h('p', {}, `digest ${image.manifestDigest} · ${bytes(image.size)} · ${image.layers.length} layers`),
        h('ul', {}, image.layers.map((l) => h('li', { class: 'mono' }, `${l.digest ?? ''} ${bytes(l.size)}`)))),
    h('details', {}, h('summary', {}, 'Raw JSON'), h('pre', {}, JSON.stringify(t, null, 2))));
  return null;
}
