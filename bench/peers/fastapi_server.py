#!/usr/bin/python3
"""Benchmark peer: the abx command-server wire contract on FastAPI + uvicorn (Debian packages).

What a Python user would write: one route per command with a Pydantic model for its kwargs
(strict types, extra keys forbidden), the token checked by a dependency, and exception handlers
that turn FastAPI's errors into the contract's {"error", "type"} bodies.

    demo(x: int, y: str = "hello") -> f"{x}: {y}"

Run it with Debian's /usr/bin/python3 (python3-fastapi, python3-uvicorn), not a pyenv python.
The endpoint is `async def` by default (the fastest FastAPI variant: no thread-pool hop);
`--sync` makes it a plain `def`, which FastAPI runs in its thread pool.

Usage: ABX_ACCESS_TOKEN=secret /usr/bin/python3 fastapi_server.py [--host H] [--port 0] [--sync]
Prints "listening on HOST:PORT" on stdout once the socket is bound.
"""

import argparse
import hmac
import os
import socket
import sys

import uvicorn
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

TOKEN = os.environ.get("ABX_ACCESS_TOKEN", "").encode()


def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"


class DemoArgs(BaseModel):
    x: StrictInt
    y: StrictStr = "hello"

    class Config:
        extra = "forbid"


COMMANDS = [{
    "name": "demo",
    "description": "Run a demo command.",
    "args": [
        {"name": "x", "type": "integer", "required": True, "default": None, "description": ""},
        {"name": "y", "type": "string", "required": False, "default": "hello", "description": ""},
    ],
}]


class Unauthorized(Exception):
    pass


def check_token(x_access_token: str = Header("")):
    if not hmac.compare_digest(x_access_token.encode(), TOKEN):
        raise Unauthorized()


app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


@app.exception_handler(Unauthorized)
async def _unauthorized(request: Request, exc: Unauthorized):
    return JSONResponse({"error": "missing or invalid X-Access-Token", "type": "Unauthorized"},
                        status_code=401)


@app.exception_handler(RequestValidationError)
async def _bad_args(request: Request, exc: RequestValidationError):
    msg = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return JSONResponse({"error": msg, "type": "ArgumentError"}, status_code=400)


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException):
    return JSONResponse({"error": str(exc.detail), "type": type(exc).__name__},
                        status_code=exc.status_code)


@app.get("/health")
async def health():
    return {"status": "ok"}


@app.get("/commands", dependencies=[Depends(check_token)])
async def list_commands():
    return {"commands": COMMANDS}


def _install_demo(sync: bool):
    if sync:
        @app.post("/commands/demo", dependencies=[Depends(check_token)])
        def demo_route(args: DemoArgs):
            return {"result": demo(args.x, args.y)}
    else:
        @app.post("/commands/demo", dependencies=[Depends(check_token)])
        async def demo_route(args: DemoArgs):  # noqa: F811
            return {"result": demo(args.x, args.y)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--sync", action="store_true", help="plain def endpoint (thread pool)")
    a = p.parse_args()
    if not TOKEN:
        sys.exit("fastapi_server: ABX_ACCESS_TOKEN is not set")
    _install_demo(a.sync)
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listener says TCP, as it does when uvicorn binds by itself. With proto 0 every keep-alive
    # response (headers and body are two writes) waits ~40 ms for the peer's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((a.host, a.port))
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=1024)
    server = uvicorn.Server(config)
    print(f"listening on {a.host}:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
