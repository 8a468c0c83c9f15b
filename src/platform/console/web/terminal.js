// The Terminal tab: a real PTY (/bin/bash -i -l) over envd's process.Process/Start with `pty`,
// its output streamed into @xterm/xterm (embedded at build time), keystrokes sent with
// SendInput, resizes with Update. Leaving the tab kills the shell.
import { b64decode, b64encode, envdCall, envdStream } from './api.js';
import { h, status } from './ui.js';

// xterm.js writes its theme and cell sizes into <style> elements (it only ever sets their
// textContent), which the console's CSP (no 'unsafe-inline') refuses. While a terminal is open,
// document.createElement('style') gives an inert <template> whose textContent goes into a
// constructed style sheet instead, which CSP allows.
function cspSafeStyles() {
  const sheets = [];
  const original = document.createElement;
  document.createElement = function createElement(tag, options) {
    if (String(tag).toLowerCase() !== 'style') return original.call(this, tag, options);
    const el = original.call(this, 'template');
    const sheet = new CSSStyleSheet();
    sheets.push(sheet);
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    let text = '';
    Object.defineProperty(el, 'textContent', {
      get: () => text,
      set: (v) => { text = String(v); sheet.replaceSync(text); },
    });
    return el;
  };
  return () => {
    document.createElement = original;
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !sheets.includes(s));
  };
}

export async function terminalTab(panel, id) {
  let mod;
  try {
    mod = await import('/console/vendor/xterm.mjs');
  } catch {
    panel.replaceChildren(h('p', { class: 'error' },
      'This abxd was built without @xterm/xterm (npm was missing at build time).'));
    return null;
  }
  if (!document.querySelector('link[data-xterm]')) {
    document.head.append(h('link', { rel: 'stylesheet', href: '/console/vendor/xterm.css', dataset: { xterm: '1' } }));
  }
  const box = h('div', { class: 'term', id: 'terminal' });
  panel.replaceChildren(h('p', { class: 'hint' }, 'A login shell in the sandbox; it ends when you leave this tab.'), box);
  const unadopt = cspSafeStyles();
  const term = new mod.Terminal({ cols: 100, rows: 24, convertEol: false, cursorBlink: true });
  term.open(box);
  window.abxTerminal = term;  // for tests and the curious: the buffer API
  const abort = new AbortController();
  let pid = 0;
  // Keystrokes in order: one SendInput in flight at a time (concurrent fetches may arrive in any
  // order); what is typed meanwhile goes out together in the next one.
  let queued = '';
  let sending = false;
  const enc = new TextEncoder();
  const flush = async () => {
    if (sending || !pid || !queued) return;
    sending = true;
    while (queued) {
      const data = queued;
      queued = '';
      await envdCall(id, 'process.Process/SendInput',
        { process: { pid }, input: { pty: b64encode(enc.encode(data)) } })
        .catch((e) => status(`terminal: ${e.message}`, 'error'));
    }
    sending = false;
  };
  term.onData((d) => { queued += d; flush(); });
  term.onResize(({ cols, rows }) => {
    if (pid) envdCall(id, 'process.Process/Update', { process: { pid }, pty: { size: { cols, rows } } }).catch(() => {});
  });
  envdStream(id, 'process.Process/Start', {
    process: { cmd: '/bin/bash', args: ['-i', '-l'], envs: { TERM: 'xterm-256color' } },
    pty: { size: { cols: term.cols, rows: term.rows } },
  }, (msg) => {
    const ev = msg.event || {};
    if (ev.start) {
      pid = ev.start.pid;
      box.dataset.pid = String(pid);
      flush();
    } else if (ev.data && ev.data.pty) {
      term.write(b64decode(ev.data.pty));
    } else if (ev.end) {
      term.write(`\r\n[exited: ${ev.end.status || 'done'}]\r\n`);
    }
  }, abort.signal).catch((e) => { if (!abort.signal.aborted) term.write(`\r\n[${e.message}]\r\n`); });
  term.focus();
  return () => {
    if (pid) envdCall(id, 'process.Process/SendSignal', { process: { pid }, signal: 'SIGNAL_SIGKILL' }).catch(() => {});
    abort.abort();
    term.dispose();
    unadopt();
    delete window.abxTerminal;
  };
}
