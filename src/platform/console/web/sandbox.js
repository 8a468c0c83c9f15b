// One sandbox: its details, and tabs for its commands, files, terminal and logs.
import { api } from './api.js';
import { codeTab } from './code.js';
import { commandsTab } from './commands.js';
import { metricsTab, networkTab, tokensTab } from './details.js';
import { filesTab } from './files.js';
import { logsTab } from './logs.js';
import { terminalTab } from './terminal.js';
import { age, h } from './ui.js';

const TABS = {
  commands: 'Commands', files: 'Files', terminal: 'Terminal', logs: 'Logs', metrics: 'Metrics',
  network: 'Network', tokens: 'Tokens',
};

export async function sandboxPage(main, id, tab) {
  const { data: sb } = await api('GET', `/sandboxes/${encodeURIComponent(id)}`);
  const net = sb.allowInternetAccess === undefined || sb.allowInternetAccess === null
    ? 'none' : sb.allowInternetAccess ? 'on' : 'off';
  const tmpl = await api('GET', `/templates/${encodeURIComponent(sb.templateID)}`).then((r) => r.data, () => ({}));
  const interpreter = tmpl.interpreter && tmpl.interpreter.port;
  const shown = interpreter ? { ...TABS, code: 'Code' } : TABS;
  const tabs = h('nav', { class: 'tabs', 'aria-label': 'Sandbox pages' },
    Object.entries(shown).map(([k, label]) => h('a', {
      href: `#/sandbox/${encodeURIComponent(id)}/${k}`, 'aria-current': k === tab ? 'page' : null,
    }, label)));
  const panel = h('section', { id: 'panel' });
  main.replaceChildren(
    h('p', {}, h('a', { href: '#/sandboxes' }, '← Sandboxes')),
    h('h1', {}, 'Sandbox ', h('span', { class: 'mono' }, id)),
    h('p', { id: 'sandbox-facts' },
      `state ${sb.state} · template ${sb.templateID} · age ${age(sb.startedAt)} · ends ${sb.endAt} · `,
      `${sb.cpuCount} CPU · ${sb.memoryMB} MiB · internet ${net}`),
    tabs, panel);
  if (tab === 'files') return filesTab(panel, id);
  if (tab === 'terminal') return terminalTab(panel, id);
  if (tab === 'code' && interpreter) return codeTab(panel, id, interpreter);
  if (tab === 'logs') return logsTab(panel, id);
  if (tab === 'metrics') return metricsTab(panel, id);
  if (tab === 'network') return networkTab(panel, id);
  if (tab === 'tokens') return tokensTab(panel, id);
  return commandsTab(panel, id);
}
