"""The Python worker that ``abx-server --python MODULE`` runs beside itself (docs/python.md).

    python3 .../abx/server/worker.py --fd N MODULE.py    serve calls on descriptor N
    python3 .../abx/server/worker.py --describe MODULE.py print {"commands": [...]} and exit

It imports the command module by path (its folder first on sys.path, as ``python3 MODULE.py``
would; the folder holding this ``abx`` package before that), freezes
``abx.server.registry.default_registry()`` and then speaks a framed protocol on descriptor N,
a socket the server made with socketpair(2). A frame is a 4-byte big-endian length and that many
bytes of UTF-8 JSON:

    worker -> server, once: {"commands": [schema...]}        the module imported
                            {"error": "<traceback>", "type": "<class>"}   it did not (then exit 1)
    server -> worker:       {"call": "<name>", "kwargs": {...}}
    worker -> server:       {"result": <value>}  or  {"error": "<message>", "type": "<class>"}

The server has already validated and coerced the kwargs (the C++ registry), so the worker only
calls. One call at a time; module state lives for as long as the process. End of input (the
server closed its end or exited) ends the worker. What the commands print goes to the server's
stderr (the server points this process's stdout there), never onto the protocol descriptor.
"""

import json
import os
import struct
import sys

_HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20  # the largest frame either side accepts

if __name__ == "__main__":
    # Run as a script: sys.path[0] is this file's folder (abx/server), which must not shadow
    # anything. The package root (the folder holding abx/) replaces it.
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path[0] = _root
    from abx.server.worker import main  # noqa: E402 — the package's copy, not __main__'s

    sys.exit(main(sys.argv[1:]))

from abx.server.registry import default_registry  # noqa: E402


def _import_module(path):
    """Imports the module at ``path`` under its file name's stem; its folder goes first on
    sys.path, as when the file is run."""
    import importlib.util  # noqa: PLC0415

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such Python module: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else "_abx_commands"
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(1, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} (not a Python source file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _user_traceback(exc):
    """The traceback without this file's and importlib's own frames."""
    import traceback  # noqa: PLC0415 — errors only: the worker's start-up does not pay for it

    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__
        or tb.tb_frame.f_code.co_filename.startswith("<frozen importlib")
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")


def load(path):
    """Imports ``path`` and freezes the registry. Returns ({"commands": [...]}, None) or
    (None, {"error": traceback, "type": class})."""
    try:
        _import_module(path)
    except BaseException as e:  # noqa: BLE001 — SystemExit or a KeyboardInterrupt at import too
        return None, {"error": _user_traceback(e), "type": type(e).__name__}
    reg = default_registry()
    reg.freeze()
    commands = [c.to_json() for c in reg.list_all().values()]
    if not commands:
        return None, {
            "error": f"{path} registers no commands (decorate functions with @sandbox.register)",
            "type": "ValueError",
        }
    return {"commands": commands}, None


class _Channel:
    def __init__(self, fd):
        self._in = os.fdopen(fd, "rb", buffering=1 << 16, closefd=False)
        self._fd = fd

    def read(self):
        head = self._in.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return None  # the server closed its end
        (n,) = _HEADER.unpack(head)
        if n > MAX_FRAME:
            raise ValueError(f"frame of {n} bytes is over the limit of {MAX_FRAME}")
        body = self._in.read(n)
        if len(body) < n:
            return None
        return json.loads(body)

    def write(self, body):
        data = _HEADER.pack(len(body)) + body
        view = memoryview(data)
        while view:
            k = os.write(self._fd, view)
            view = view[k:]


def _encode_result(name, value):
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        data = text.encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as e:
        return _error(
            f"command '{name}' returned a value that JSON cannot carry "
            f"({type(value).__name__}): {e}",
            "TypeError",
        )
    if len(data) + 16 > MAX_FRAME:
        return _error(f"command '{name}' returned {len(data)} bytes of JSON, over the limit "
                      f"of {MAX_FRAME}", "ValueError")
    return b'{"result":' + data + b"}"


def _error(message, type_name):
    return json.dumps({"error": message, "type": type_name}, ensure_ascii=True).encode()


def call(request):
    """Runs one call request; returns the answer frame's body."""
    name = request.get("call")
    kwargs = request.get("kwargs") or {}
    cmd = default_registry().get(name) if isinstance(name, str) else None
    if cmd is None:
        return _error(f"unknown command '{name}'", "NotFound")
    try:
        value = cmd.fn(**kwargs)
    except BaseException as e:  # noqa: BLE001 — report SystemExit too, do not die of it
        sys.stderr.write(f"abx worker: command '{name}' raised:\n{_user_traceback(e)}\n")
        sys.stderr.flush()
        return _error(str(e) or type(e).__name__, type(e).__name__)
    return _encode_result(name, value)


def serve(fd, path):
    chan = _Channel(fd)
    hello, err = load(path)
    chan.write(json.dumps(hello if err is None else err, ensure_ascii=True).encode())
    if err is not None:
        return 1
    while True:
        request = chan.read()
        if request is None:
            return 0
        chan.write(call(request))


def describe(path):
    hello, err = load(path)
    if err is not None:
        sys.stderr.write(err["error"] + "\n")
        return 1
    sys.stdout.write(json.dumps(hello, ensure_ascii=False) + "\n")
    return 0


USAGE = "usage: worker.py --fd N MODULE.py | --describe MODULE.py"


def main(argv):
    if len(argv) == 3 and argv[0] == "--fd" and argv[1].isdigit():
        return serve(int(argv[1]), argv[2])
    if len(argv) == 2 and argv[0] == "--describe":
        return describe(argv[1])
    sys.stderr.write(USAGE + "\n")
    return 2
