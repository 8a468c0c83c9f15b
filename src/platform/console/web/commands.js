// The Commands tab: the command server's GET /commands schema as forms, checked in the browser
// by the schema (and again by the server), the call's result or error type, and the same call
// as `abx run`, curl, and the JS and Python SDKs.
import { COMMANDS_PORT, sandboxFetch } from './api.js';
import { act, h, shq } from './ui.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

// The form's text for one argument as the JSON value the schema wants, or an Error naming why
// not. Empty text for an optional argument: undefined (the server's default applies).
export function convert(arg, text, checked) {
  if (arg.type === 'boolean') return checked;
  if (text === '') {
    if (arg.required) throw new Error(`${arg.name} is required`);
    return undefined;
  }
  if (arg.type === 'integer') {
    if (!/^[+-]?\d+$/.test(text)) throw new Error(`${arg.name} must be an integer`);
    const v = BigInt(text);
    if (v < INT64_MIN || v > INT64_MAX) throw new Error(`${arg.name} is out of the int64 range`);
    return Number(v);
  }
  if (arg.type === 'float') {
    const v = Number(text);
    if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text) || !Number.isFinite(v)) {
      throw new Error(`${arg.name} must be a finite number`);
    }
    return v;
  }
  return text;
}

function argInput(cmd, arg) {
  const id = `arg-${cmd.name}-${arg.name}`;
  const input = arg.type === 'boolean'
    ? h('input', { id, name: arg.name, type: 'checkbox', checked: arg.default === true })
    : h('input', { id, name: arg.name, type: 'text', required: !!arg.required,
      inputmode: arg.type === 'string' ? 'text' : 'decimal',
      value: arg.default === undefined || arg.default === null ? '' : String(arg.default),
      'aria-describedby': `${id}-err` });
  return h('div', {},
    h('label', { for: id }, arg.name, arg.required ? ' *' : '',
      h('span', { class: 'hint' }, ` ${arg.type}`, arg.default !== undefined && arg.default !== null
        ? ` = ${JSON.stringify(arg.default)}` : '')),
    input,
    arg.description ? h('div', { class: 'hint' }, arg.description) : null,
    h('div', { class: 'field-error', id: `${id}-err`, 'aria-live': 'polite' }));
}

// A Python literal for a JSON value (str, int, float, bool).
function py(v) {
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  return JSON.stringify(v);
}

function snippets(id, cmd, args) {
  const a = Object.entries(args).map(([k, v]) => ` -a ${shq(`${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)}`).join('');
  const body = JSON.stringify(args);
  const kw = Object.entries(args).map(([k, v]) => `${k}=${py(v)}`).join(', ');
  return [
    `# abx CLI\nabx run ${id} ${cmd.name}${a}`,
    `# curl (TOKEN: the sandbox's envdAccessToken, or a scoped token)\n` +
      `curl -s -X POST ${location.origin}/commands/${cmd.name} \\\n  -H 'E2b-Sandbox-Id: ${id}' -H 'E2b-Sandbox-Port: ${COMMANDS_PORT}' \\\n` +
      `  -H "X-Access-Token: $TOKEN" -H 'Content-Type: application/json' \\\n  -d ${shq(body)}`,
    `// JavaScript: the e2b SDK with abx-commands (js/abx-commands)\n` +
      `const sbx = await Sandbox.connect('${id}');\n` +
      `await commands(sbx).callCommand('${cmd.name}', ${body});`,
    `# Python: abx.sdk (python/)\n` +
      `Sandbox.connect("${id}").server.call("${cmd.name}"${kw ? `, ${kw}` : ''})`,
  ].join('\n\n');
}

function commandCard(id, cmd) {
  const fields = cmd.args.map((arg) => argInput(cmd, arg));
  const skip = h('input', { type: 'checkbox', id: `skip-${cmd.name}` });
  const result = h('pre', { class: 'result', id: `result-${cmd.name}`, 'aria-live': 'polite' });
  const snippet = h('pre', { class: 'snippet', id: `snippet-${cmd.name}` });
  const form = h('form', { class: 'card', dataset: { command: cmd.name }, novalidate: true,
    onsubmit: async (ev) => {
      ev.preventDefault();
      const args = {};
      let bad = false;
      for (const arg of cmd.args) {
        const el = form.elements[arg.name];
        const err = form.querySelector(`[id="arg-${cmd.name}-${arg.name}-err"]`);
        err.textContent = '';
        if (skip.checked) {
          // The server checks: the text goes as typed (booleans as booleans).
          if (arg.type === 'boolean') args[arg.name] = el.checked;
          else if (el.value !== '') args[arg.name] = el.value;
          continue;
        }
        try {
          const v = convert(arg, el.value, el.checked);
          if (v !== undefined) args[arg.name] = v;
        } catch (e) {
          err.textContent = e.message;
          bad = true;
        }
      }
      snippet.textContent = snippets(id, cmd, args);
      if (bad) {
        result.textContent = 'Not sent: fix the arguments above.';
        result.className = 'result error';
        return;
      }
      result.textContent = 'Calling…';
      result.className = 'result';
      try {
        const res = await act(`Calling ${cmd.name}`, () => sandboxFetch(id, COMMANDS_PORT,
          `/commands/${encodeURIComponent(cmd.name)}`, {
            method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(args),
          }));
        const body = await res.json().catch(() => ({ error: `HTTP ${res.status}`, type: '' }));
        if (res.ok) {
          result.textContent = `result: ${JSON.stringify(body.result, null, 2)}`;
        } else {
          result.textContent = `${res.status} ${body.type || ''}: ${body.error || body.message || ''}`;
          result.className = 'result error';
        }
        result.dataset.status = String(res.status);
      } catch (e) {
        result.textContent = e.message;
        result.className = 'result error';
      }
    } },
  h('h2', {}, cmd.name),
  cmd.description ? h('p', {}, cmd.description) : null,
  fields,
  h('p', {}, h('button', { type: 'submit' }, 'Call'), ' ',
    h('label', { for: `skip-${cmd.name}`, class: 'hint inline-label' }, skip,
      ' skip the browser\'s checks (let the server validate)')),
  result, h('details', {}, h('summary', {}, 'The same call from a shell'), snippet));
  return form;
}

export async function commandsTab(panel, id) {
  panel.replaceChildren(h('p', {}, 'Loading commands…'));
  const res = await sandboxFetch(id, COMMANDS_PORT, '/commands');
  if (!res.ok) {
    const text = await res.text();
    let msg = text;
    try { const j = JSON.parse(text); msg = j.message || j.error || text; } catch { /* text */ }
    panel.replaceChildren(h('p', { class: 'error', id: 'commands-error' },
      `This sandbox serves no commands (${res.status}: ${msg})`));
    return null;
  }
  const { commands } = await res.json();
  panel.replaceChildren(h('p', { class: 'hint' }, `${commands.length} registered commands`),
    ...commands.map((c) => commandCard(id, c)));
  return null;
}
