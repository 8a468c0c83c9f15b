"""The synchronous host SDK: sandboxes on abxd (or any E2B-compatible control plane), their
processes and files, and the registered commands their command servers publish."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence

from . import templates as tpl
from ._http import Endpoint, Response, Transport, control_auth, parse_url, url_encode
from .config import ConnectionConfig
from .errors import (AbxError, AuthError, CapabilityError, NotFound, Timeout, Unavailable,
                     error_from_response)

ENVD_PORT = 49983
COMMAND_SERVER_PORT = 49982


# --- the control plane ---------------------------------------------------------------------------

class _Control:
    def __init__(self, config: ConnectionConfig, transport: Transport):
        self.config = config
        self.transport = transport

    def request(self, method: str, target: str, body: Any = None, *, idempotent: bool,
                timeout: Optional[float] = None) -> Response:
        ep = parse_url(self.config.api_url)
        headers, before_send = control_auth(self.config)
        headers = dict(headers)
        data = b""
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        return self.transport.send(ep, method, target, data, headers, idempotent=idempotent,
                                   timeout=timeout, before_send=before_send)

    def json(self, method: str, target: str, body: Any = None, *, idempotent: bool,
             what: str, timeout: Optional[float] = None):
        r = self.request(method, target, body, idempotent=idempotent, timeout=timeout)
        if r.status // 100 != 2:
            raise error_from_response(r.status, r.body, plane="api", what=what)
        if not r.body:
            return None, r.status
        try:
            return json.loads(r.body), r.status
        except ValueError:
            raise AbxError(f"{what}: bad JSON from the platform", status=r.status,
                           type="Internal") from None


# --- results ---------------------------------------------------------------------------------------

@dataclass
class CommandResult:
    """A finished process. A non-zero exit is not an exception: check ``exit_code``."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # envd's end.error, e.g. "exit status 1"


@dataclass
class SandboxInfo:
    sandbox_id: str
    template_id: str = ""
    envd_access_token: str = ""
    client_id: str = ""
    envd_version: str = ""
    domain: str = ""
    state: str = ""
    started_at: str = ""
    end_at: str = ""
    metadata: Dict[str, str] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, v: Any) -> "SandboxInfo":
        if not isinstance(v, dict) or not isinstance(v.get("sandboxID"), str):
            raise AbxError(f"sandbox: expected an object with sandboxID, got {v!r}",
                           type="Internal")

        def s(k: str) -> str:
            x = v.get(k)
            return x if isinstance(x, str) else ""

        md = v.get("metadata") if isinstance(v.get("metadata"), dict) else {}
        return cls(s("sandboxID"), s("templateID"), s("envdAccessToken"), s("clientID"),
                   s("envdVersion"), s("domain"), s("state"), s("startedAt"), s("endAt"),
                   {k: x for k, x in md.items() if isinstance(x, str)}, v)


# --- shared state of a Sandbox and its views --------------------------------------------------------

class _State:
    def __init__(self, config: ConnectionConfig, info: SandboxInfo, transport: Transport,
                 access_token: str, capabilities: Optional[frozenset] = None):
        self.config = config
        self.info = info
        self.transport = transport
        self.control = _Control(config, transport)
        self.access_token = access_token
        self.lock = threading.Lock()
        self.capabilities = capabilities
        self.platform_template: Optional[Dict[str, Any]] = None

    # Capabilities: the local template's, else the platform's GET /templates/{id}, else the
    # defaults — resolved once, as libabx does.
    def resolve_capabilities(self) -> frozenset:
        with self.lock:
            if self.capabilities is not None:
                return self.capabilities
        tid = self.info.template_id
        caps = tpl.DEFAULT_CAPABILITIES
        local = tpl.find_local_template(self.config.abx_home(), tid)
        if local is not None:
            caps = local.capabilities
        elif tid:
            t = self.template_from_platform()
            if t is not None:
                caps = tpl.capabilities_from_template_json(t) or caps
        with self.lock:
            self.capabilities = caps
        return caps

    def template_from_platform(self) -> Optional[Dict[str, Any]]:
        """GET /templates/{id}; None when unreachable or unknown, AuthError raised."""
        if self.platform_template is not None:
            return self.platform_template
        try:
            t, _ = self.control.json("GET", "/templates/" + url_encode(self.info.template_id),
                                     idempotent=True, what=f"template {self.info.template_id}")
        except AuthError:
            raise
        except AbxError:
            return None
        self.platform_template = t if isinstance(t, dict) else None
        return self.platform_template

    def check(self, capability: str) -> None:
        if capability not in self.resolve_capabilities():
            raise CapabilityError(
                f"sandbox {self.info.sandbox_id} (template {self.info.template_id or '?'}) lacks "
                f"the '{capability}' capability", type="MissingCapability")

    def plane(self, port: int) -> Endpoint:
        url = {COMMAND_SERVER_PORT: self.config.server_url,
               ENVD_PORT: self.config.sandbox_url}.get(port, "")
        return parse_url(url or self.config.api_url)

    def plane_headers(self, port: int) -> Dict[str, str]:
        h = {"E2b-Sandbox-Id": self.info.sandbox_id, "E2b-Sandbox-Port": str(port)}
        if self.access_token:
            h["X-Access-Token"] = self.access_token
        return h

    def plane_send(self, port: int, method: str, target: str, body: bytes = b"",
                   headers: Optional[Dict[str, str]] = None, *, idempotent: bool,
                   timeout: Optional[float] = None) -> Response:
        h = self.plane_headers(port)
        if headers:
            h.update(headers)
        return self.transport.send(self.plane(port), method, target, body, h,
                                   idempotent=idempotent, timeout=timeout)


# --- views -----------------------------------------------------------------------------------------

def _envelope(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


class Commands:
    """Processes through envd's ``process.Process/Start`` (needs ``shell``)."""

    def __init__(self, state: _State):
        self._s = state

    def run(self, cmd: str, *, envs: Optional[Dict[str, str]] = None, cwd: str = "",
            user: str = "", timeout: Optional[float] = None) -> CommandResult:
        """Runs ``cmd`` with ``/bin/bash -l -c`` and waits. ``timeout`` (seconds): envd kills
        the process when it passes, and this raises :class:`Timeout`."""
        self._s.check("shell")
        return self.run_argv(["/bin/bash", "-l", "-c", cmd], envs=envs, cwd=cwd, user=user,
                             timeout=timeout)

    def run_argv(self, argv: Sequence[str], *, envs: Optional[Dict[str, str]] = None,
                 cwd: str = "", user: str = "", timeout: Optional[float] = None
                 ) -> CommandResult:
        if not argv:
            raise AbxError("commands: empty argv", type="InvalidArgument")
        process: Dict[str, Any] = {"cmd": argv[0], "args": list(argv[1:])}
        if envs:
            process["envs"] = dict(envs)
        if cwd:
            process["cwd"] = cwd
        body = _envelope(json.dumps({"process": process, "stdin": False}).encode("utf-8"))
        headers = self._s.plane_headers(ENVD_PORT)
        headers.update({"Content-Type": "application/connect+json",
                        "Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "30"})
        if timeout:
            headers["Connect-Timeout-Ms"] = str(int(timeout * 1000))
        if user:
            headers["Authorization"] = "Basic " + base64.b64encode(
                (user + ":").encode("utf-8")).decode("ascii")
        idle = max(self._s.config.request_timeout, 75.0)
        started = time.monotonic()
        r = self._s.transport.open_stream(self._s.plane(ENVD_PORT), "POST",
                                          "/process.Process/Start", body, headers, idle)
        try:
            try:
                data = r.read()
            except OSError as e:
                raise Unavailable(f"process stream: {e}") from e
            status = r.status
        finally:
            r.close()
            r._abx_conn.close()
        if status != 200 or data[:1] == b"{":
            raise error_from_response(status, data, plane="envd", what="process.Process/Start")
        result = self._parse(data)
        if result.exit_code != 0 and timeout and time.monotonic() - started >= timeout:
            raise Timeout(f"command timed out after {timeout:g} s"
                          + (f" ({result.error})" if result.error else ""),
                          type="DeadlineExceeded")
        return result

    @staticmethod
    def _parse(data: bytes) -> CommandResult:
        out, err = bytearray(), bytearray()
        res = CommandResult()
        started = ended = got_end = False
        i = 0
        while i + 5 <= len(data):
            flags, n = struct.unpack(">BI", data[i:i + 5])
            payload = data[i + 5:i + 5 + n]
            if len(payload) < n:
                break
            i += 5 + n
            try:
                msg = json.loads(payload) if payload else {}
            except ValueError:
                raise AbxError("bad JSON in a Connect frame", type="Internal") from None
            if flags & 0x02:
                ended = True
                e = msg.get("error") if isinstance(msg, dict) else None
                if isinstance(e, dict):
                    code = e.get("code", "unknown")
                    text = f"envd: {code}: {e.get('message', '')}"
                    if code == "deadline_exceeded":
                        raise Timeout(text, type="DeadlineExceeded")
                    if code == "unauthenticated":
                        raise AuthError(text, type="Unauthenticated")
                    if code == "not_found":
                        raise NotFound(text, type="NotFound")
                    raise AbxError(text, type=str(code))
                continue
            ev = msg.get("event") if isinstance(msg, dict) else None
            if not isinstance(ev, dict):
                continue
            if "start" in ev:
                started = True
            elif isinstance(ev.get("data"), dict):
                for k, sink in (("stdout", out), ("pty", out), ("stderr", err)):
                    if isinstance(ev["data"].get(k), str):
                        sink += base64.b64decode(ev["data"][k])
            elif isinstance(ev.get("end"), dict):
                got_end = True
                end = ev["end"]
                res.exit_code = int(end.get("exitCode", end.get("exit_code", 0)) or 0)
                res.error = end.get("error") or ""
        if not (started and ended and got_end):
            raise Unavailable("the process stream ended without an end event")
        res.stdout = out.decode("utf-8", "replace")
        res.stderr = err.decode("utf-8", "replace")
        return res


class Files:
    """Whole files through envd's ``/files`` (needs ``files``)."""

    def __init__(self, state: _State):
        self._s = state

    def read(self, path: str, *, format: str = "text") -> Any:
        """The file's content: ``str`` (UTF-8) or, with ``format="bytes"``, ``bytes``."""
        if format not in ("text", "bytes"):
            raise AbxError("format must be 'text' or 'bytes'", type="InvalidArgument")
        self._s.check("files")
        r = self._s.plane_send(ENVD_PORT, "GET", "/files?path=" + url_encode(path),
                               idempotent=True)
        if r.status != 200:
            raise error_from_response(r.status, r.body, plane="envd", what=f"read {path}")
        return r.body if format == "bytes" else r.body.decode("utf-8")

    def write(self, path: str, data: Any) -> Dict[str, Any]:
        """Replaces the file (parents are created); returns envd's description of it."""
        self._s.check("files")
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        r = self._s.plane_send(ENVD_PORT, "POST", "/files?path=" + url_encode(path), body,
                               {"Content-Type": "application/octet-stream"}, idempotent=True)
        if r.status != 200:
            raise error_from_response(r.status, r.body, plane="envd", what=f"write {path}")
        try:
            entries = json.loads(r.body)
            return entries[0]
        except (ValueError, IndexError, KeyError, TypeError):
            raise AbxError(f"write {path}: envd did not describe the written file",
                           type="Internal") from None


class CommandServer:
    """The sandbox's command server (port 49982): ``POST /commands/{name}``,
    ``GET /commands``."""

    def __init__(self, state: _State):
        self._s = state

    def call(self, name: str, /, **kwargs: Any) -> Any:
        """The command's result (``200 {"result": …}``)."""
        return self.call_raw(name, kwargs)["result"]

    def call_raw(self, name: str, kwargs: Optional[Dict[str, Any]] = None, *,
                 timeout: Optional[float] = None) -> Dict[str, Any]:
        """The whole success body. Calls are POSTs and are never retried once sent."""
        body = json.dumps(kwargs or {}, separators=(",", ":")).encode("utf-8")
        r = self._s.plane_send(COMMAND_SERVER_PORT, "POST", "/commands/" + url_encode(name),
                               body, {"Content-Type": "application/json"}, idempotent=False,
                               timeout=timeout)
        if r.status != 200:
            raise error_from_response(r.status, r.body, plane="server", what=f"command {name}",
                                      command=name)
        try:
            v = json.loads(r.body)
        except ValueError:
            v = None
        if not isinstance(v, dict) or "result" not in v:
            raise AbxError(f"command {name}: the server's answer is not {{\"result\": …}}",
                           status=r.status, type="Internal")
        return v

    def list(self) -> List[tpl.CommandEntry]:
        """``GET /commands``: what this caller may run (a scoped token sees only its own)."""
        r = self._s.plane_send(COMMAND_SERVER_PORT, "GET", "/commands", idempotent=True)
        if r.status != 200:
            raise error_from_response(r.status, r.body, plane="server", what="list commands")
        try:
            v = json.loads(r.body)
        except ValueError:
            v = None
        if not isinstance(v, dict) or not isinstance(v.get("commands"), list):
            raise AbxError("GET /commands: expected {\"commands\": […]}", type="Internal")
        return [tpl.entry_from_json(c, "remote") for c in v["commands"]]


# --- Layer 1 for a Python command module ----------------------------------------------------------

def describe_module(path: str, python: Optional[str] = None) -> List[tpl.CommandEntry]:
    """The commands a Python command module registers, read locally (no server, no auth): runs
    ``python3 -m abx.server.worker --describe <path>`` (the in-sandbox worker's documented
    describe mode) and parses the schema it prints. An import error, a bad annotation or a
    duplicate name raises :class:`InvalidArguments` with the worker's message."""
    from .errors import InvalidArguments
    exe = python or sys.executable
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
    try:
        p = subprocess.run([exe, "-m", "abx.server.worker", "--describe", os.fspath(path)],
                           capture_output=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AbxError(f"describe {path}: {e}", type="Unavailable") from e
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip() or f"exit code {p.returncode}"
        raise InvalidArguments(f"command module {path}: {msg}", type="InvalidArgument")
    try:
        v = json.loads(p.stdout)
    except ValueError:
        raise AbxError(f"describe {path}: the worker printed no JSON", type="Internal") from None
    cmds = v.get("commands") if isinstance(v, dict) else v
    if not isinstance(cmds, list):
        raise AbxError(f"describe {path}: expected a list of commands", type="Internal")
    return [tpl.entry_from_json(c, "registered") for c in cmds]


def merge_commands(*layers: Iterable[tpl.CommandEntry]) -> List[tpl.CommandEntry]:
    """Merges discovery layers by name (the first layer wins), sorted by name."""
    seen: Dict[str, tpl.CommandEntry] = {}
    for layer in layers:
        for e in layer:
            seen.setdefault(e.name, e)
    return [seen[k] for k in sorted(seen)]


def discover_local(template_id: str = "", modules: Sequence[str] = (),
                   config: Optional[ConnectionConfig] = None) -> List[Dict[str, Any]]:
    """Layer 1 alone, without a sandbox or network: the custom commands of the local template
    ``template_id`` and the commands of ``modules`` (Python command modules)."""
    cfg = config or ConnectionConfig.from_env()
    yaml_entries: List[tpl.CommandEntry] = []
    if template_id:
        t = tpl.find_local_template(cfg.abx_home(), template_id)
        if t is None:
            raise NotFound(f"no local template '{template_id}' under "
                           f"{cfg.abx_home() / 'templates'}", type="NotFound")
        yaml_entries = list(t.custom_commands.values())
    registered = [e for m in modules for e in describe_module(m)]
    return [e.to_dict() for e in merge_commands(yaml_entries, registered)]


# --- Sandbox -------------------------------------------------------------------------------------

class Sandbox:
    """A sandbox handle. Copies made by :meth:`with_access_token` share the connection pool.

    ``with Sandbox.create("demo") as sbx:`` kills the sandbox when the block ends."""

    def __init__(self, state: _State):
        self._s = state
        self.commands = Commands(state)
        self.files = Files(state)
        self.server = CommandServer(state)

    # -- lifecycle (control plane) --

    @classmethod
    def create(cls, template: str = "base", *, timeout: int = 300,
               metadata: Optional[Dict[str, str]] = None, envs: Optional[Dict[str, str]] = None,
               secure: bool = True, allow_internet_access: bool = True,
               config: Optional[ConnectionConfig] = None) -> "Sandbox":
        """``POST /sandboxes``: returns once the sandbox (and its command server, if the
        template has one) is up. ``timeout``: the sandbox's lifetime in seconds."""
        cfg = config or ConnectionConfig.from_env()
        t = Transport(cfg)
        body = {"templateID": template, "timeout": int(timeout), "secure": secure,
                "allow_internet_access": allow_internet_access,
                "metadata": dict(metadata or {}), "envVars": dict(envs or {})}
        v, _ = _Control(cfg, t).json("POST", "/sandboxes", body, idempotent=False,
                                     what="create sandbox")
        info = SandboxInfo.from_json(v)
        info.template_id = info.template_id or template
        return cls(_State(cfg, info, t, info.envd_access_token))

    @classmethod
    def connect(cls, sandbox_id: str, *, timeout: int = 300,
                config: Optional[ConnectionConfig] = None) -> "Sandbox":
        """``POST /sandboxes/{id}/connect``: resumes a paused sandbox, extends a running one's
        lifetime to at least ``timeout`` seconds, and returns a handle with its access token."""
        cfg = config or ConnectionConfig.from_env()
        t = Transport(cfg)
        v, _ = _Control(cfg, t).json("POST", f"/sandboxes/{url_encode(sandbox_id)}/connect",
                                     {"timeout": int(timeout)}, idempotent=False,
                                     what=f"connect to sandbox {sandbox_id}")
        info = SandboxInfo.from_json(v)
        return cls(_State(cfg, info, t, info.envd_access_token))

    @classmethod
    def attach(cls, sandbox_id: str, *, template_id: str = "", access_token: str = "",
               capabilities: Optional[Iterable[str]] = None,
               config: Optional[ConnectionConfig] = None) -> "Sandbox":
        """Direct mode, no control plane: a handle from what the caller knows (for a standalone
        ``abx-server``/``abx-envd`` at ``config.server_url``/``sandbox_url``)."""
        cfg = config or ConnectionConfig.from_env()
        info = SandboxInfo(sandbox_id, template_id, access_token or cfg.access_token)
        caps = frozenset(capabilities) if capabilities is not None else None
        return cls(_State(cfg, info, Transport(cfg), info.envd_access_token, caps))

    @staticmethod
    def list(*, config: Optional[ConnectionConfig] = None) -> List[SandboxInfo]:
        """``GET /v2/sandboxes`` (running and paused), every page."""
        cfg = config or ConnectionConfig.from_env()
        t = Transport(cfg)
        c = _Control(cfg, t)
        out: List[SandboxInfo] = []
        nxt = ""
        try:
            while True:
                target = "/v2/sandboxes?limit=100" + (f"&nextToken={url_encode(nxt)}" if nxt
                                                      else "")
                r = c.request("GET", target, idempotent=True)
                if r.status != 200:
                    raise error_from_response(r.status, r.body, plane="api",
                                              what="list sandboxes")
                out += [SandboxInfo.from_json(x) for x in json.loads(r.body)]
                nxt = r.headers.get("X-Next-Token", "")
                if not nxt:
                    return out
        finally:
            t.close()

    @staticmethod
    def kill_id(sandbox_id: str, *, config: Optional[ConnectionConfig] = None) -> bool:
        """``DELETE /sandboxes/{id}``: True when killed, False when there was no such sandbox."""
        cfg = config or ConnectionConfig.from_env()
        t = Transport(cfg)
        try:
            r = _Control(cfg, t).request("DELETE", "/sandboxes/" + url_encode(sandbox_id),
                                         idempotent=True)
        finally:
            t.close()
        if r.status // 100 == 2:
            return True
        if r.status == 404:
            return False
        raise error_from_response(r.status, r.body, plane="api",
                                  what=f"kill sandbox {sandbox_id}")

    def kill(self) -> bool:
        r = self._s.control.request("DELETE", "/sandboxes/" + url_encode(self.id), idempotent=True)
        if r.status // 100 == 2:
            return True
        if r.status == 404:
            return False
        raise error_from_response(r.status, r.body, plane="api", what=f"kill sandbox {self.id}")

    def set_timeout(self, timeout: int) -> None:
        """``POST /sandboxes/{id}/timeout``: the sandbox now ends ``timeout`` seconds from now."""
        self._s.control.json("POST", f"/sandboxes/{url_encode(self.id)}/timeout",
                             {"timeout": int(timeout)}, idempotent=True,
                             what=f"set timeout of sandbox {self.id}")

    def get_info(self) -> SandboxInfo:
        """``GET /sandboxes/{id}``."""
        v, _ = self._s.control.json("GET", "/sandboxes/" + url_encode(self.id), idempotent=True,
                                    what=f"sandbox {self.id}")
        return SandboxInfo.from_json(v)

    def __enter__(self) -> "Sandbox":
        return self

    def close(self) -> None:
        """Closes this handle's idle connections (shared with its with_access_token copies).
        The sandbox runs on; the handle stays usable and reconnects when used."""
        self._s.transport.close()

    def __exit__(self, *exc) -> None:
        try:
            self.kill()
        finally:
            self.close()

    # -- identity --

    @property
    def id(self) -> str:
        return self._s.info.sandbox_id

    @property
    def sandbox_id(self) -> str:
        return self._s.info.sandbox_id

    @property
    def template_id(self) -> str:
        return self._s.info.template_id

    @property
    def info(self) -> SandboxInfo:
        """What create/connect returned (:meth:`get_info` asks again)."""
        return self._s.info

    @property
    def config(self) -> ConnectionConfig:
        return self._s.config

    @property
    def capabilities(self) -> frozenset:
        """The template's capabilities (``shell``, ``files``, ``code``, ``ports``): the local
        template's, else the platform's ``GET /templates/{id}``, else shell, files and code.
        Resolved once; every call that needs one checks it before sending anything and raises
        :class:`CapabilityError`."""
        return self._s.resolve_capabilities()

    # -- scoped tokens --

    def scoped_token(self, commands: Sequence[str], ttl: int = 600) -> str:
        """``POST /sandboxes/{id}/tokens``: a command-server token limited to ``commands`` and
        valid for ``ttl`` seconds, minted by the platform with this client's credentials."""
        if ttl <= 0:
            raise AbxError("scoped token: ttl must be positive", type="InvalidArgument")
        v, _ = self._s.control.json("POST", f"/sandboxes/{url_encode(self.id)}/tokens",
                                    {"commands": list(commands), "ttlSeconds": int(ttl)},
                                    idempotent=False,
                                    what=f"mint a scoped token for sandbox {self.id}")
        if not isinstance(v, dict) or not isinstance(v.get("token"), str):
            raise AbxError("mint token: the platform sent no token", type="Internal")
        return v["token"]

    def with_access_token(self, token: str) -> "Sandbox":
        """A handle sharing this one's pool that authenticates with ``token`` (e.g. a scoped
        one) on the sandbox plane."""
        st = _State(self._s.config, self._s.info, self._s.transport, token,
                    self._s.capabilities)
        st.platform_template = self._s.platform_template
        return Sandbox(st)

    # -- discovery and custom commands --

    def list_commands(self, *, modules: Sequence[str] = (), remote: bool = True
                      ) -> List[Dict[str, Any]]:
        """Two-layer discovery, merged by name (remote > yaml > registered), sorted by name;
        each entry ``{"name", "description", "source", "args": [{"name", "type", "required",
        "default", "description"}]}`` (+ ``"command"`` for yaml entries).

        Layer 1 (local, no auth): the template's ``custom_commands`` from
        ``$ABX_HOME/templates`` and the Python command ``modules`` (read by the worker's
        describe mode). Layer 2 (``remote``, the execution credentials): the command server's
        ``GET /commands``; and, when the template is not local, the platform's template
        metadata. A 401 in Layer 2 is raised, never papered over with local results."""
        tid = self.template_id
        local = tpl.find_local_template(self.config.abx_home(), tid)
        yaml_entries = list(local.custom_commands.values()) if local else []
        registered = [e for m in modules for e in describe_module(m)]
        remote_entries: List[tpl.CommandEntry] = []
        if remote:
            try:
                remote_entries = self.server.list()
            except AuthError as e:
                if e.status == 401:
                    raise
            except AbxError:
                pass  # no command server answers: the template's custom commands remain
            if local is None and tid:
                t = self._s.template_from_platform()
                if t is not None:
                    yaml_entries += tpl.custom_commands_from_template_json(t).values()
        return [e.to_dict() for e in merge_commands(remote_entries, yaml_entries, registered)]

    def _custom_command(self, name: str) -> tpl.CommandEntry:
        tid = self.template_id
        local = tpl.find_local_template(self.config.abx_home(), tid)
        if local is not None:
            cmds = local.custom_commands
        else:
            t = self._s.template_from_platform() if tid else None
            cmds = tpl.custom_commands_from_template_json(t) if t else {}
        if name not in cmds:
            raise tpl.command_not_found(tid, name)
        return cmds[name]

    def render(self, name: str, /, **kwargs: Any) -> str:
        """The shell command :meth:`run` would run (arguments checked, values quoted)."""
        return tpl.render_custom_command(self._custom_command(name), kwargs)

    def run(self, name: str, /, **kwargs: Any) -> CommandResult:
        """Runs the template's custom command ``name`` (``custom_commands`` in template.yaml,
        local or from the platform): arguments checked against its schema, every value
        shell-quoted into its ``{placeholder}``, then run through :attr:`commands`. Needs
        ``shell`` (checked first)."""
        self._s.check("shell")
        return self.commands.run(self.render(name, **kwargs))

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, template={self.template_id!r})"
