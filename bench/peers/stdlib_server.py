#!/usr/bin/env python3
"""Benchmark peer: the abx command-server wire contract on the Python standard library only.

This is the stdlib-only server of the design records (http.server.ThreadingHTTPServer, one
thread per connection, HTTP/1.1 keep-alive), serving one command:

    demo(x: int, y: str = "hello") -> f"{x}: {y}"

Wire contract (same as abx-server):
  GET  /health                      -> 200 {"status":"ok"}              (no auth)
  GET  /commands                    -> 200 {"commands":[...]}           (auth)
  POST /commands/{name}  JSON kwargs -> 200 {"result": ...}             (auth)
  errors -> {"error": "<message>", "type": "<class>"} with 400/401/404/405/413/415/500.

Strict coercion: integer accepts only JSON integers (not bools, not floats), string only strings;
missing required and unknown args are 400; duplicate keys and non-object bodies are 400.

Usage: ABX_ACCESS_TOKEN=secret stdlib_server.py [--host 127.0.0.1] [--port 0]
Prints "listening on HOST:PORT" on stdout once the socket is bound.
"""

import argparse
import hmac
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20

_TYPES = {"integer": int, "string": str, "float": float, "boolean": bool}


def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"


COMMANDS = {
    "demo": {
        "fn": demo,
        "description": "Run a demo command.",
        "args": [
            {"name": "x", "type": "integer", "required": True, "default": None, "description": ""},
            {"name": "y", "type": "string", "required": False, "default": "hello",
             "description": ""},
        ],
    },
}


class ArgError(Exception):
    pass


def _coerce(arg, value):
    t = arg["type"]
    if t == "integer":
        if type(value) is not int or not (-(1 << 63) <= value < (1 << 63)):
            raise ArgError(f"argument '{arg['name']}' must be an integer")
    elif t == "float":
        if type(value) not in (int, float) or value != value or value in (float("inf"),
                                                                            float("-inf")):
            raise ArgError(f"argument '{arg['name']}' must be a number")
        value = float(value)
    elif t == "boolean":
        if type(value) is not bool:
            raise ArgError(f"argument '{arg['name']}' must be a boolean")
    elif t == "string":
        if type(value) is not str:
            raise ArgError(f"argument '{arg['name']}' must be a string")
    return value


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ArgError(f"duplicate key '{k}'")
        out[k] = v
    return out


def bind_kwargs(cmd, body):
    try:
        obj = json.loads(body, object_pairs_hook=_no_duplicates)
    except ArgError:
        raise
    except (ValueError, RecursionError) as e:
        raise ArgError(f"malformed JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ArgError("request body must be a JSON object")
    known = {a["name"] for a in cmd["args"]}
    for k in obj:
        if k not in known:
            raise ArgError(f"unknown argument '{k}'")
    kwargs = {}
    for a in cmd["args"]:
        if a["name"] in obj:
            kwargs[a["name"]] = _coerce(a, obj[a["name"]])
        elif a["required"]:
            raise ArgError(f"missing required argument '{a['name']}'")
        else:
            kwargs[a["name"]] = a["default"]
    return kwargs


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    # Headers and body go out in two writes; without TCP_NODELAY the second one waits for the
    # peer's delayed ACK (~40 ms) on every keep-alive call.
    disable_nagle_algorithm = True
    server_version = "stdlib-peer"
    sys_version = ""
    token = b""

    def log_message(self, format, *args):  # noqa: A002 - no per-request logging
        pass

    def _send(self, status, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status, message, etype):
        self._send(status, {"error": message, "type": etype})

    def _authorized(self):
        got = self.headers.get("X-Access-Token", "").encode()
        return hmac.compare_digest(got, self.token)

    def _read_body(self):
        n = self.headers.get("Content-Length")
        try:
            n = int(n) if n is not None else 0
        except ValueError:
            n = -1
        if n < 0:
            self.close_connection = True
            self._error(400, "bad Content-Length", "BadRequest")
            return None
        if n > MAX_BODY:
            self.close_connection = True
            self._error(413, "request body too large", "PayloadTooLarge")
            return None
        return self.rfile.read(n)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path.startswith("/commands/"):
            return self._error(405, "method not allowed", "MethodNotAllowed")
        if self.path != "/commands":
            return self._error(404, f"not found: {self.path}", "NotFound")
        if not self._authorized():
            return self._error(401, "missing or invalid X-Access-Token", "Unauthorized")
        listing = [{"name": n, "description": c["description"], "args": c["args"]}
                   for n, c in COMMANDS.items()]
        self._send(200, {"commands": listing})

    def do_POST(self):
        body = self._read_body()
        if body is None:
            return
        if not self.path.startswith("/commands/"):
            return self._error(404 if self.path != "/commands" else 405, "not found", "NotFound")
        if not self._authorized():
            return self._error(401, "missing or invalid X-Access-Token", "Unauthorized")
        name = self.path[len("/commands/"):]
        cmd = COMMANDS.get(name)
        if cmd is None:
            return self._error(404, f"unknown command '{name}'", "NotFound")
        ctype = self.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if ctype != "application/json":
            return self._error(415, "body must be application/json", "UnsupportedMediaType")
        try:
            kwargs = bind_kwargs(cmd, body)
        except ArgError as e:
            return self._error(400, str(e), "ArgumentError")
        try:
            result = cmd["fn"](**kwargs)
        except Exception as e:  # the command threw: 500 with its class name
            return self._error(500, str(e), type(e).__name__)
        self._send(200, {"result": result})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    token = os.environ.get("ABX_ACCESS_TOKEN")
    if not token:
        sys.exit("stdlib_server: ABX_ACCESS_TOKEN is not set")
    Handler.token = token.encode()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    print(f"listening on {a.host}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
