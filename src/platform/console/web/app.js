// The console's entry: sign-in and the hash router (#/sandboxes, #/sandbox/<id>/<tab>,
// #/templates, #/templates/<id>).
import { api, apiKey, clearApiKey, setApiKey } from './api.js';
import { h, status } from './ui.js';
import { sandboxesPage } from './sandboxes.js';
import { sandboxPage } from './sandbox.js';
import { templatesPage, templatePage } from './templates.js';

const main = document.getElementById('main');
let cleanup = null;

function signIn() {
  document.getElementById('nav').hidden = true;
  const input = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', required: true,
    spellcheck: 'false' });
  const form = h('form', { class: 'card signin', onsubmit: async (ev) => {
    ev.preventDefault();
    setApiKey(input.value.trim());
    status('Signing in…');
    try {
      await api('GET', '/templates');
      status('Signed in', 'ok');
      route();
    } catch (e) {
      clearApiKey();
      status(`Sign-in failed: ${e.message}`, 'error');
    }
  } },
  h('h1', {}, 'Sign in'),
  h('label', { for: 'api-key' }, 'API key'),
  input,
  h('p', { class: 'hint' }, 'Kept in this tab only (sessionStorage) and sent as X-API-Key. ',
    'abxd printed it on first start; it is also in ~/.abx/api_key.'),
  h('button', { type: 'submit' }, 'Sign in'));
  main.replaceChildren(form);
  input.focus();
}

async function route() {
  if (cleanup) { cleanup(); cleanup = null; }
  if (!apiKey()) return signIn();
  document.getElementById('nav').hidden = false;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  try {
    if (parts[0] === 'sandbox' && parts[1]) cleanup = await sandboxPage(main, parts[1], parts[2] || 'commands');
    else if (parts[0] === 'templates' && parts[1]) cleanup = await templatePage(main, parts[1]);
    else if (parts[0] === 'templates') cleanup = await templatesPage(main);
    else cleanup = await sandboxesPage(main);
  } catch (e) {
    if (e.status === 401) { clearApiKey(); signIn(); }
    status(e.message, 'error');
  }
}

document.getElementById('sign-out').addEventListener('click', () => {
  clearApiKey();
  location.hash = '#/sandboxes';
  status('Signed out');
  route();
});
window.addEventListener('hashchange', route);
route();
