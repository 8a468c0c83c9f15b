// DOM helpers: elements are built with properties and text nodes, never from HTML strings.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// The page's one status line (role=status): feedback for every action, errors in the API's
// own words.
export function status(text, kind = '') {
  const el = document.getElementById('status');
  el.textContent = text;
  el.className = kind;
}

// Runs an action with immediate feedback ("<what>…"), then the outcome.
export async function act(what, fn) {
  status(`${what}…`);
  try {
    const r = await fn();
    status(`${what}: done`, 'ok');
    return r;
  } catch (e) {
    status(`${what}: ${e.message}`, 'error');
    throw e;
  }
}

export function age(iso) {
  if (!iso) return '';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return duration(s);
}
export function duration(s) {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
export function bytes(n) {
  if (n === undefined || n === null) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${u[i]}`;
}
// A shell word, quoted for POSIX sh.
export function shq(s) {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${String(s).replaceAll("'", "'\\''")}'`;
}
