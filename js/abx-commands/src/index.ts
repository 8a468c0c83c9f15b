// abx-commands: registered commands of abx sandboxes for users of the e2b JS SDK.
//
// A sandbox's command server (port 49982) answers GET /commands and POST /commands/{name}; abxd
// routes requests to it exactly as it routes the e2b SDK's envd traffic (E2b-Sandbox-Id /
// E2b-Sandbox-Port headers on E2B_SANDBOX_URL, or hosts {port}-{id}.{domain}) and checks the
// sandbox's access token (X-Access-Token) — the full one, or a scoped one minted by
// POST /sandboxes/{id}/tokens. This module wraps those calls with types and typed errors.
//
//   import { Sandbox } from 'e2b';
//   import { commands } from 'abx-commands';
//   const sbx = await Sandbox.create('demo');
//   const cmds = commands(sbx);
//   await cmds.listCommands();                       // [{ name: 'add', args: [...] }, ...]
//   await cmds.callCommand('demo', { x: 42 });       // '42: hello'
import type { Sandbox } from 'e2b';

/** The command server's port inside a sandbox (abx's default). */
export const DEFAULT_COMMAND_PORT = 49982;

/** An argument type as the command server publishes it. */
export type ArgType = 'integer' | 'float' | 'boolean' | 'string';

/** One argument of a registered command (`GET /commands` → `args[]`). */
export interface CommandArg {
  name: string;
  type: ArgType;
  required: boolean;
  /** The default of an optional argument; `null` when it has none (and for required ones). */
  default: string | number | boolean | null;
  description: string;
}

/** One registered command (`GET /commands` → `commands[]`). */
export interface CommandInfo {
  name: string;
  description: string;
  args: CommandArg[];
}

/** JSON values (a command's arguments and results). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A scoped token minted by abxd. */
export interface ScopedToken {
  token: string;
  expiresAt: Date;
  commands: string[];
}

// ---------------------------------------------------------------------------------------------
// Errors

/** The JSON error body the request failed with, when it had one. */
export type ErrorBody =
  | { error: string; type: string } // the command server
  | { code: number; message: string } // abxd (control API and proxy)
  | Record<string, unknown>;

/**
 * Every failure of this module. `status` is the HTTP status (0 when no response arrived),
 * `code` the error's class: the command server's `type` (`InvalidArgument`, `NotFound`,
 * `Unauthenticated`, `DeadlineExceeded`, `Unavailable`, or the C++ exception class of a
 * command that threw, e.g. `std::domain_error`), else a name derived from the status or the
 * transport failure. `message` is the server's own message.
 */
export class AbxCommandError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: ErrorBody | undefined;
  /** The command the call was for, if any. */
  readonly command: string | undefined;

  constructor(
    message: string,
    init: { status: number; code: string; body?: ErrorBody | undefined; command?: string | undefined; cause?: unknown }
  ) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status;
    this.code = init.code;
    this.body = init.body;
    this.command = init.command;
  }
}

/**
 * 404 from the command server: no such command — or one outside a scoped token's commands
 * (the server does not tell them apart, so a scoped caller learns nothing about the others).
 */
export class CommandNotFoundError extends AbxCommandError {}

/**
 * 400: the arguments were refused — unknown, missing or mistyped (or a body that is not a JSON
 * object). `field` is the first argument the server named, `fields` all of them.
 */
export class InvalidArgumentsError extends AbxCommandError {
  readonly field: string | undefined;
  readonly fields: string[];

  constructor(message: string, init: ConstructorParameters<typeof AbxCommandError>[1]) {
    super(message, init);
    this.fields = argumentNames(message);
    this.field = this.fields[0];
  }
}

/** 401 (missing, wrong, expired or foreign token) or 403 from the command server. */
export class UnauthorizedError extends AbxCommandError {}

/**
 * The call ran too long: the client's `timeoutMs` passed (status 0, code `Timeout`), or the
 * command server's call deadline did (504, `DeadlineExceeded`). A command that timed out may
 * still be running in the sandbox.
 */
export class CommandTimeoutError extends AbxCommandError {}

/**
 * No command server answered: nothing listens on the port (abxd: 502), the server is shutting
 * down or full (503), abxd keeps the port private because the sandbox's template has no command
 * server (abxd: 403 with `{"code":403,...}`), the sandbox is gone, or the connection failed.
 */
export class ServerUnavailableError extends AbxCommandError {}

/** 500: the command ran and threw; `code` is its exception class. */
export class CommandFailedError extends AbxCommandError {}

// "argument 'x' must be ...", "unknown arguments 'a', 'b' for ...", "missing required argument 'x' ..."
function argumentNames(message: string): string[] {
  const m = /arguments? ((?:'[^']*'(?:, )?)+)/.exec(message);
  if (!m || m[1] === undefined) return [];
  return [...m[1].matchAll(/'([^']*)'/g)].map((x) => x[1] ?? '');
}

const STATUS_CODES: Record<number, string> = {
  400: 'InvalidArgument',
  401: 'Unauthenticated',
  403: 'PermissionDenied',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'FailedPrecondition',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  429: 'ResourceExhausted',
  500: 'Internal',
  502: 'Unavailable',
  503: 'Unavailable',
  504: 'DeadlineExceeded',
};

function errorFromResponse(
  status: number,
  text: string,
  plane: 'server' | 'api',
  command: string | undefined
): AbxCommandError {
  let b: Record<string, unknown> | undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) b = parsed as Record<string, unknown>;
  } catch {
    b = undefined;
  }
  const body = b as ErrorBody | undefined;
  const fromServer = typeof b?.['type'] === 'string' && typeof b?.['error'] === 'string';
  const message =
    typeof b?.['error'] === 'string'
      ? b['error']
      : typeof b?.['message'] === 'string'
        ? b['message']
        : text.trim() || `HTTP ${status}`;
  const code = fromServer ? String(b?.['type']) : (STATUS_CODES[status] ?? `HTTP${status}`);
  const init = { status, code, body, command };
  if (status === 400) return new InvalidArgumentsError(message, init);
  if (status === 401) return new UnauthorizedError(message, init);
  if (status === 403) {
    // abxd refuses a port that is not the template's command server (and not opened by the
    // `ports` capability) with 403: there is no command server to reach.
    if (plane === 'server' && !fromServer) return new ServerUnavailableError(message, init);
    return new UnauthorizedError(message, init);
  }
  if (status === 404 && plane === 'server' && (fromServer || command !== undefined)) {
    return new CommandNotFoundError(message, init);
  }
  if (status === 504) return new CommandTimeoutError(message, init);
  if (status === 502 || status === 503) return new ServerUnavailableError(message, init);
  if (status === 500 && plane === 'server' && fromServer) return new CommandFailedError(message, init);
  return new AbxCommandError(message, init);
}

function transportError(e: unknown, what: string, command: string | undefined, timeoutMs: number): AbxCommandError {
  const name = e instanceof Error ? e.name : '';
  if (name === 'TimeoutError') {
    return new CommandTimeoutError(`${what}: no answer within ${timeoutMs} ms`, {
      status: 0,
      code: 'Timeout',
      command,
      cause: e,
    });
  }
  if (name === 'AbortError') {
    return new AbxCommandError(`${what}: aborted`, { status: 0, code: 'Aborted', command, cause: e });
  }
  const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new ServerUnavailableError(`${what}: ${detail}`, { status: 0, code: 'Unavailable', command, cause: e });
}

// ---------------------------------------------------------------------------------------------
// The client

/** Where and how to reach one sandbox's command server. */
export interface AbxCommandsOptions {
  /** The sandbox's id (routes the request; the `E2b-Sandbox-Id` header). */
  sandboxId: string;
  /**
   * The token sent as `X-Access-Token`: the sandbox's access token (what the e2b SDK calls the
   * envd access token) or a scoped token. Omit for a sandbox created with `secure: false`.
   */
  accessToken?: string | undefined;
  /**
   * abxd's address for sandbox traffic (`E2B_SANDBOX_URL`): requests go there with the
   * `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers. Default: `$E2B_SANDBOX_URL`.
   */
  sandboxUrl?: string | undefined;
  /**
   * The command server's own base URL, used as is (no routing headers), e.g.
   * `https://49982-<id>.example.com` or `http://127.0.0.1:49982`. Wins over `sandboxUrl`.
   */
  baseUrl?: string | undefined;
  /** abxd's control API (`E2B_API_URL`), for `scopedToken`. Default: `$E2B_API_URL`. */
  apiUrl?: string | undefined;
  /** The API key for `scopedToken` (`E2B_API_KEY`). Default: `$E2B_API_KEY`. */
  apiKey?: string | undefined;
  /** The command server's port. Default 49982. */
  port?: number | undefined;
  /** Default timeout of each request in ms (0: none). Default 60 000. */
  requestTimeoutMs?: number | undefined;
  /**
   * How often `listCommands` retries a 502/503 or a failed connection (a command server starts
   * just after the sandbox does), with doubling back-off from 100 ms. Default 5. Calls are never
   * retried: a command may have side effects.
   */
  retries?: number | undefined;
  /** Extra headers on every request. */
  headers?: Record<string, string> | undefined;
  /** The fetch to use. Default: the global one. */
  fetch?: typeof fetch | undefined;
}

/** Options of `commands(sandbox, opts)`: everything the sandbox does not give already. */
export type FromSandboxOptions = Partial<AbxCommandsOptions>;

/** Options of one call. */
export interface CallOptions {
  /** Give up after this many ms (0: never) with `CommandTimeoutError`. Default: requestTimeoutMs. */
  timeoutMs?: number | undefined;
  /** Abort the request. */
  signal?: AbortSignal | undefined;
}

const env = (name: string): string | undefined => {
  const v = typeof process !== 'undefined' ? process.env[name] : undefined;
  return v ? v : undefined;
};

/** The e2b SDK's ConnectionConfig fields this module reads (all public on ConnectionConfig). */
interface E2bConnectionConfig {
  apiKey?: string;
  apiUrl?: string;
  sandboxUrl?: string;
  debug?: boolean;
  requestTimeoutMs?: number;
}

/**
 * A client for one sandbox's registered commands.
 *
 * Build it from an e2b `Sandbox` with `commands(sandbox)` / `AbxCommands.fromSandbox(sandbox)`,
 * or from explicit options (`new AbxCommands({ sandboxId, accessToken, sandboxUrl })`) — e.g.
 * in a process that was handed only a sandbox id and a scoped token.
 */
export class AbxCommands {
  readonly sandboxId: string;
  readonly port: number;
  private readonly opts: AbxCommandsOptions;
  private readonly doFetch: typeof fetch;

  constructor(opts: AbxCommandsOptions) {
    if (!opts.sandboxId) throw new TypeError('abx-commands: sandboxId is required');
    this.opts = { ...opts };
    this.sandboxId = opts.sandboxId;
    this.port = opts.port ?? DEFAULT_COMMAND_PORT;
    this.doFetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    if (!opts.baseUrl && !(opts.sandboxUrl ?? env('E2B_SANDBOX_URL'))) {
      throw new TypeError(
        'abx-commands: no way to reach the sandbox: give baseUrl or sandboxUrl (or set E2B_SANDBOX_URL)'
      );
    }
  }

  /**
   * A client for `sandbox`'s command server, with the sandbox's credentials and routing.
   *
   * Reads the sandbox's public `sandboxId` and `getHost(port)`, and two fields the e2b SDK
   * declares `protected` (they are plain properties at run time): `envdAccessToken` (the
   * sandbox's access token, which the command server port accepts too) and `connectionConfig`
   * (its `sandboxUrl`, `apiUrl`, `apiKey`, `debug`, `requestTimeoutMs`). Any of them can be given
   * in `opts` instead. Routing follows the SDK's own for envd: `sandboxUrl` with routing
   * headers when set (E2B_SANDBOX_URL), else `http://` + `getHost(port)` in debug mode, else
   * `https://` + `getHost(port)` (`{port}-{id}.{domain}`).
   */
  static fromSandbox(sandbox: Sandbox, opts: FromSandboxOptions = {}): AbxCommands {
    const hidden = sandbox as unknown as { envdAccessToken?: string; connectionConfig?: E2bConnectionConfig };
    const cc: E2bConnectionConfig = hidden.connectionConfig ?? {};
    const port = opts.port ?? DEFAULT_COMMAND_PORT;
    const sandboxUrl = opts.sandboxUrl ?? cc.sandboxUrl;
    let baseUrl = opts.baseUrl;
    if (!baseUrl && !sandboxUrl) baseUrl = `${cc.debug ? 'http' : 'https'}://${sandbox.getHost(port)}`;
    return new AbxCommands({
      ...opts,
      sandboxId: opts.sandboxId ?? sandbox.sandboxId,
      accessToken: 'accessToken' in opts ? opts.accessToken : hidden.envdAccessToken,
      sandboxUrl,
      baseUrl,
      apiUrl: opts.apiUrl ?? cc.apiUrl,
      apiKey: opts.apiKey ?? cc.apiKey,
      port,
      requestTimeoutMs: opts.requestTimeoutMs ?? cc.requestTimeoutMs,
    });
  }

  /**
   * The same sandbox through another token (e.g. a scoped one). The copy keeps no API key
   * unless `apiKey` is given: hand it to a less trusted party as it is.
   */
  withToken(token: string, opts: { apiKey?: string } = {}): AbxCommands {
    return new AbxCommands({ ...this.opts, accessToken: token, apiKey: opts.apiKey });
  }

  /**
   * `GET /commands`: the commands this caller may run, with their argument schemas (a scoped
   * token sees only its own). Retries while no command server answers yet (see `retries`).
   */
  async listCommands(opts: CallOptions = {}): Promise<CommandInfo[]> {
    const retries = this.opts.retries ?? 5;
    let backoff = 100;
    for (let attempt = 0; ; attempt++) {
      try {
        const body = await this.request('GET', '/commands', undefined, undefined, opts);
        const list = (body as { commands?: unknown }).commands;
        if (!Array.isArray(list)) {
          throw new AbxCommandError('GET /commands: the answer has no "commands" array', {
            status: 200,
            code: 'InvalidResponse',
          });
        }
        return list.map(parseCommandInfo);
      } catch (e) {
        const again =
          e instanceof ServerUnavailableError && (e.status === 0 || e.status === 502 || e.status === 503);
        if (!again || attempt >= retries || opts.signal?.aborted) throw e;
        await new Promise((r) => setTimeout(r, backoff + Math.floor(Math.random() * (backoff / 2))));
        backoff *= 2;
      }
    }
  }

  /**
   * `POST /commands/{name}` with `args` as its JSON keyword arguments; resolves to the
   * command's result. Rejects with `CommandNotFoundError`, `InvalidArgumentsError`,
   * `UnauthorizedError`, `CommandTimeoutError`, `ServerUnavailableError`, `CommandFailedError`
   * or `AbxCommandError`.
   */
  async callCommand<T = JsonValue>(
    name: string,
    args: Record<string, JsonValue> = {},
    opts: CallOptions = {}
  ): Promise<T> {
    const body = await this.request('POST', `/commands/${encodeURIComponent(name)}`, args, name, opts);
    if (!body || typeof body !== 'object' || !('result' in body)) {
      throw new AbxCommandError(`command '${name}': the answer has no "result"`, {
        status: 200,
        code: 'InvalidResponse',
        command: name,
      });
    }
    return (body as { result: T }).result;
  }

  /**
   * Mints a token that reaches only `commands` of this sandbox's command server, valid for
   * `ttlSeconds` (1 s to 30 days; abxd's default when omitted): `POST /sandboxes/{id}/tokens`
   * on abxd with the API key. Use it with `withToken(token)` or hand it to another process.
   */
  async scopedToken(commands: string[], ttlSeconds?: number, opts: CallOptions = {}): Promise<ScopedToken> {
    const apiUrl = this.opts.apiUrl ?? env('E2B_API_URL');
    const apiKey = this.opts.apiKey ?? env('E2B_API_KEY');
    if (!apiUrl) throw new TypeError('abx-commands: scopedToken needs apiUrl (or E2B_API_URL)');
    if (!apiKey) throw new TypeError('abx-commands: scopedToken needs apiKey (or E2B_API_KEY)');
    const payload: Record<string, JsonValue> = { commands };
    if (ttlSeconds !== undefined) payload['ttlSeconds'] = ttlSeconds;
    const url = `${apiUrl.replace(/\/+$/, '')}/sandboxes/${encodeURIComponent(this.sandboxId)}/tokens`;
    const headers: Record<string, string> = {
      ...this.opts.headers,
      'Content-Type': 'application/json',
      'X-API-KEY': apiKey,
    };
    const body = await this.send(url, 'POST', headers, JSON.stringify(payload), 'api', undefined, opts, 'minting a token');
    const b = body as { token?: unknown; expiresAt?: unknown };
    if (typeof b.token !== 'string' || typeof b.expiresAt !== 'string') {
      throw new AbxCommandError('POST /sandboxes/{id}/tokens: the answer has no token', {
        status: 201,
        code: 'InvalidResponse',
      });
    }
    return { token: b.token, expiresAt: new Date(b.expiresAt), commands: [...commands] };
  }

  private request(
    method: 'GET' | 'POST',
    path: string,
    json: Record<string, JsonValue> | undefined,
    command: string | undefined,
    opts: CallOptions
  ): Promise<unknown> {
    const headers: Record<string, string> = { ...this.opts.headers };
    let url: string;
    if (this.opts.baseUrl) {
      url = this.opts.baseUrl.replace(/\/+$/, '') + path;
    } else {
      url = (this.opts.sandboxUrl ?? env('E2B_SANDBOX_URL') ?? '').replace(/\/+$/, '') + path;
      headers['E2b-Sandbox-Id'] = this.sandboxId;
      headers['E2b-Sandbox-Port'] = String(this.port);
    }
    if (this.opts.accessToken) headers['X-Access-Token'] = this.opts.accessToken;
    let body: string | undefined;
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(json);
    }
    const what = command !== undefined ? `command '${command}'` : `${method} ${path}`;
    return this.send(url, method, headers, body, 'server', command, opts, what);
  }

  private async send(
    url: string,
    method: string,
    headers: Record<string, string>,
    body: string | undefined,
    plane: 'server' | 'api',
    command: string | undefined,
    opts: CallOptions,
    what: string
  ): Promise<unknown> {
    const timeoutMs = opts.timeoutMs ?? this.opts.requestTimeoutMs ?? 60_000;
    const signals: AbortSignal[] = [];
    if (timeoutMs > 0) signals.push(AbortSignal.timeout(timeoutMs));
    if (opts.signal) signals.push(opts.signal);
    const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
    let res: Response;
    let text: string;
    try {
      const init: RequestInit = { method, headers };
      if (body !== undefined) init.body = body;
      if (signal) init.signal = signal;
      res = await this.doFetch(url, init);
      text = await res.text();
    } catch (e) {
      throw transportError(e, what, command, timeoutMs);
    }
    if (!res.ok) throw errorFromResponse(res.status, text, plane, command);
    try {
      return JSON.parse(text) as unknown;
    } catch (e) {
      throw new AbxCommandError(`${what}: the answer is not JSON`, {
        status: res.status,
        code: 'InvalidResponse',
        command,
        cause: e,
      });
    }
  }
}

function parseCommandInfo(v: unknown): CommandInfo {
  const o = (v ?? {}) as Record<string, unknown>;
  const args = Array.isArray(o['args']) ? o['args'] : [];
  return {
    name: String(o['name'] ?? ''),
    description: typeof o['description'] === 'string' ? o['description'] : '',
    args: args.map((a: unknown) => {
      const x = (a ?? {}) as Record<string, unknown>;
      const d = x['default'];
      return {
        name: String(x['name'] ?? ''),
        type: String(x['type'] ?? 'string') as ArgType,
        required: x['required'] === true,
        default: typeof d === 'string' || typeof d === 'number' || typeof d === 'boolean' ? d : null,
        description: typeof x['description'] === 'string' ? x['description'] : '',
      };
    }),
  };
}

/** `AbxCommands.fromSandbox(sandbox, opts)`. */
export function commands(sandbox: Sandbox, opts: FromSandboxOptions = {}): AbxCommands {
  return AbxCommands.fromSandbox(sandbox, opts);
}
