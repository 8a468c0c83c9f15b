// The Code tab, for sandboxes whose template has a code interpreter: a cell that runs Python
// through the interpreter's POST /execute (NDJSON stream), showing stdout, stderr, results
// (text, PNG figures) and errors as they arrive.
import { sandboxFetch, checked, readNdjson } from './api.js';
import { act, h } from './ui.js';

export async function codeTab(panel, id, port) {
  const code = h('textarea', { id: 'code', rows: '8', class: 'mono', spellcheck: 'false' });
  code.value = 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\nprint(6 * 7)';
  const out = h('div', { id: 'code-output', 'aria-live': 'polite' });
  const run = async () => {
    out.replaceChildren();
    const text = (cls, t) => out.append(h('pre', { class: cls }, t));
    await act('Running the cell', async () => {
      const res = await checked(sandboxFetch(id, port, '/execute', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ code: code.value, language: 'python' }),
      }));
      await readNdjson(res, (ev) => {
        if (ev.type === 'stdout') text('stdout', ev.text);
        else if (ev.type === 'stderr') text('stderr error', ev.text);
        else if (ev.type === 'error') text('error', `${ev.name}: ${ev.value}\n${ev.traceback || ''}`);
        else if (ev.type === 'result') {
          if (ev.png) out.append(h('img', { src: `data:image/png;base64,${ev.png}`, alt: 'figure', class: 'figure' }));
          else if (ev.text !== undefined) text('result', ev.text);
        }
      });
    }).catch((e) => text('error', e.message));
    out.append(h('p', { class: 'hint', dataset: { done: '1' } }, 'finished'));
  };
  code.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); run(); }
  });
  panel.replaceChildren(
    h('label', { for: 'code' }, 'Python (Ctrl+Enter runs)'), code,
    h('p', {}, h('button', { type: 'button', id: 'run-code', onclick: run }, 'Run')), out);
  return null;
}
