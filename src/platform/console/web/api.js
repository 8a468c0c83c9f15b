// The control API and the sandboxes' envd and command server, all on abxd's own origin.
// The API key lives in sessionStorage only (gone with the tab) and travels as X-API-Key; a
// sandbox's envd and command server are reached through abxd's gateway with the E2b-Sandbox-Id
// and E2b-Sandbox-Port headers and the sandbox's access token in X-Access-Token.

const KEY = 'abx.apiKey';
export const ENVD_PORT = 49983;
export const COMMANDS_PORT = 49982;

export function apiKey() { return sessionStorage.getItem(KEY) || ''; }
export function setApiKey(k) { sessionStorage.setItem(KEY, k); }
export function clearApiKey() { sessionStorage.removeItem(KEY); }

// An answer that was not 2xx, with the server's own message (E2B's {code, message}, the command
// server's {error, type}, Connect's {code, message}).
export class ApiError extends Error {
  constructor(status, message, type) {
    super(message);
    this.status = status;
    this.type = type || '';
  }
}

async function failure(res) {
  const text = await res.text();
  let message = text || res.statusText;
  let type = '';
  try {
    const j = JSON.parse(text);
    message = j.message ?? j.error ?? message;
    type = j.type ?? (typeof j.code === 'string' ? j.code : '');
  } catch { /* not JSON: the text itself */ }
  return new ApiError(res.status, `${res.status}: ${message}`, type);
}

export async function api(method, path, body) {
  const headers = { 'X-API-Key': apiKey() };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store', credentials: 'omit',
  });
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return null;
  const type = res.headers.get('Content-Type') || '';
  const data = type.includes('json') ? await res.json() : await res.text();
  return { data, headers: res.headers, status: res.status };
}

// Access tokens of sandboxes, from GET /sandboxes/{id} (kept in memory only).
const tokens = new Map();
export async function sandboxToken(id) {
  if (!tokens.has(id)) {
    const { data } = await api('GET', `/sandboxes/${encodeURIComponent(id)}`);
    tokens.set(id, data.envdAccessToken || '');
  }
  return tokens.get(id);
}

// A request to `port` inside sandbox `id` through the gateway; the raw Response (ok or not).
export async function sandboxFetch(id, port, path, init = {}) {
  const headers = new Headers(init.headers || {});
  headers.set('E2b-Sandbox-Id', id);
  headers.set('E2b-Sandbox-Port', String(port));
  const token = await sandboxToken(id);
  if (token) headers.set('X-Access-Token', token);
  return fetch(path, { ...init, headers, cache: 'no-store', credentials: 'omit' });
}

// A unary Connect-JSON call to envd (process.Process/…, filesystem.Filesystem/…).
export async function envdCall(id, method, message) {
  const res = await sandboxFetch(id, ENVD_PORT, `/${method}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(message),
  });
  if (!res.ok) throw await failure(res);
  return res.json();
}

export async function checked(resPromise) {
  const res = await resPromise;
  if (!res.ok) throw await failure(res);
  return res;
}

// A server-streaming Connect call: one request envelope; `onMessage` gets each data message;
// resolves at the end-stream frame (rejects with its error). `signal` aborts.
export async function envdStream(id, method, message, onMessage, signal) {
  const json = new TextEncoder().encode(JSON.stringify(message));
  const body = new Uint8Array(5 + json.length);
  new DataView(body.buffer).setUint32(1, json.length);
  body.set(json, 5);
  const res = await sandboxFetch(id, ENVD_PORT, `/${method}`, {
    method: 'POST', body, signal,
    headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
      'Connect-Timeout-Ms': '3600000' },
  });
  if (!res.ok) throw await failure(res);
  const reader = res.body.getReader();
  let buf = new Uint8Array(0);
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new ApiError(0, 'the stream ended without its end frame');
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf);
    joined.set(value, buf.length);
    buf = joined;
    while (buf.length >= 5) {
      const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + len) break;
      const flags = buf[0];
      const msg = JSON.parse(decoder.decode(buf.subarray(5, 5 + len)) || '{}');
      buf = buf.slice(5 + len);
      if (flags & 2) {
        if (msg.error) throw new ApiError(200, `${msg.error.code}: ${msg.error.message}`, msg.error.code);
        return;
      }
      onMessage(msg);
    }
  }
}

export function b64encode(bytes) {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}
export function b64decode(text) {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

// Reads a response's NDJSON body to its end, calling onEvent(event, line) for each non-empty
// line as it arrives (template build progress, code-interpreter output).
export async function readNdjson(res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onEvent(JSON.parse(line), line);
    }
  }
}
