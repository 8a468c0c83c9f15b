// The Files tab: a directory listing over envd's filesystem.Filesystem/ListDir, text and image
// view and download over GET /files, upload over POST /files (multipart), delete over Remove.
import { checked, envdCall, ENVD_PORT, sandboxFetch } from './api.js';
import { act, bytes, h } from './ui.js';

const VIEW_LIMIT = 1 << 20;  // a text view shows at most 1 MiB

function filesUrl(path) { return `/files?${new URLSearchParams({ path })}`; }

export async function filesTab(panel, id, start = '/home/user') {
  let dir = start;
  const pathInput = h('input', { id: 'dir', type: 'text', value: dir, class: 'mono' });
  const table = h('table', { id: 'file-list' });
  const viewer = h('section', { id: 'viewer', 'aria-live': 'polite' });
  const upload = h('input', { id: 'upload', type: 'file', multiple: true });
  let shownUrl = '';  // the object URL of the image in view, revoked when another is shown

  async function load() {
    const data = await act(`Listing ${dir}`, () => envdCall(id, 'filesystem.Filesystem/ListDir',
      { path: dir, depth: 1 }));
    const entries = (data.entries || []).sort((a, b) => a.name.localeCompare(b.name));
    const parent = dir.replace(/\/[^/]+\/?$/, '') || '/';
    table.replaceChildren(
      h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Size'), h('th', {}, 'Modified'), h('th', {}, '')),
      dir !== '/' ? h('tr', {}, h('td', {}, h('button', { type: 'button',
        onclick: () => go(parent) }, '..'))) : null,
      ...entries.map((e) => {
        const isDir = e.type === 'FILE_TYPE_DIRECTORY';
        return h('tr', { dataset: { name: e.name } },
          h('td', {}, isDir
            ? h('button', { type: 'button', onclick: () => go(e.path) }, `${e.name}/`)
            : h('button', { type: 'button', onclick: () => view(e) }, e.name)),
          h('td', {}, isDir ? '' : bytes(e.size)),
          h('td', {}, e.modifiedTime || ''),
          h('td', {},
            isDir ? null : h('button', { type: 'button', dataset: { action: 'download' },
              onclick: () => download(e) }, 'Download'), ' ',
            h('button', { type: 'button', class: 'danger', dataset: { action: 'delete' },
              onclick: () => remove(e) }, 'Delete')));
      }));
  }
  function go(p) { dir = p; pathInput.value = p; load().catch(() => {}); }

  async function fetchFile(e) {
    const res = await checked(sandboxFetch(id, ENVD_PORT, filesUrl(e.path)));
    return res.blob();
  }
  async function view(e) {
    const blob = await act(`Reading ${e.path}`, () => fetchFile(e)).catch(() => null);
    if (!blob) return;
    if (shownUrl) { URL.revokeObjectURL(shownUrl); shownUrl = ''; }
    if (/\.(png|jpe?g|gif|webp)$/i.test(e.name)) {
      shownUrl = URL.createObjectURL(blob);
      viewer.replaceChildren(h('h2', {}, e.path), h('img', { src: shownUrl, alt: e.name }));
      return;
    }
    const text = await blob.slice(0, VIEW_LIMIT).text();
    viewer.replaceChildren(h('h2', {}, e.path), h('pre', { id: 'file-content' }, text),
      blob.size > VIEW_LIMIT ? h('p', { class: 'hint' }, 'Only the first MiB is shown.') : null);
  }
  async function download(e) {
    const blob = await act(`Downloading ${e.path}`, () => fetchFile(e)).catch(() => null);
    if (!blob) return;
    const a = h('a', { href: URL.createObjectURL(blob), download: e.name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  }
  async function remove(e) {
    if (!confirm(`Delete ${e.path}?`)) return;
    await act(`Deleting ${e.path}`, () => envdCall(id, 'filesystem.Filesystem/Remove', { path: e.path }))
      .then(load, () => {});
  }
  upload.addEventListener('change', async () => {
    for (const file of upload.files) {
      const target = `${dir.replace(/\/$/, '')}/${file.name}`;
      const form = new FormData();
      form.append('file', file, target);
      await act(`Uploading ${target}`, () => checked(sandboxFetch(id, ENVD_PORT, filesUrl(target),
        { method: 'POST', body: form }))).catch(() => {});
    }
    upload.value = '';
    load().catch(() => {});
  });

  panel.replaceChildren(
    h('form', { class: 'inline', onsubmit: (ev) => { ev.preventDefault(); go(pathInput.value); } },
      h('label', { for: 'dir' }, 'Directory'), pathInput, h('button', { type: 'submit' }, 'Go'),
      h('label', { for: 'upload' }, 'Upload'), upload),
    table, viewer);
  await load().catch(() => {});
  return null;
}
