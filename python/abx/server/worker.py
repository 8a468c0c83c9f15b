"""The Python worker that ``abx-server --python MODULE`` runs beside itself (docs/python.md).

    python3 .../abx/server/worker.py --fd N MODULE.py    serve calls on descriptor N
    python3 .../abx/server/worker.py --describe MODULE.py print {"commands": [...]} and exit

(envd and abx-server run it through ``abx/server/run.py``, which imports this module compiled.)

It imports the command module by path (its folder first on sys.path, as ``python3 MODULE.py``
would; the folder holding this ``abx`` package before that), freezes
``abx.server.registry.default_registry()`` and then speaks a framed protocol on descriptor N,
a socket the server made with socketpair(2). A frame is a 4-byte big-endian length and that many
bytes of UTF-8 JSON:

    worker -> server, once: {"commands": [schema...], "pid": N}   the module imported
                            {"error": "<traceback>", "type": "<class>", "pid": N}   it did not
                                                                    (then exit 1)
    server -> worker:       {"call": "<name>", "kwargs": {...}}
    worker -> server:       {"result": <value>}  or  {"error": "<message>", "type": "<class>"}

The server has already validated and coerced the kwargs (the C++ registry), so the worker only
calls. One call at a time; module state lives for as long as the process. End of input (the
server closed its end or exited) ends the worker. What the commands print goes to the server's
stderr (the server points this process's stdout there), never onto the protocol descriptor.
"""

import os
import sys

# Start-up is on a sandbox's create path (issue 37), so the worker imports no module it can do
# without: frames are read with int.from_bytes rather than `struct`, and JSON goes through the
# `json` package's own C codec (`_json`) rather than the package, whose import pulls in `re`
# (~15 ms in a sandbox). Where `_json` is missing (not CPython) the package is used.
try:
    from _json import encode_basestring as _c_str
    from _json import encode_basestring_ascii as _c_str_ascii
    from _json import make_encoder as _c_make_encoder
    from _json import make_scanner as _c_make_scanner
except ImportError:  # pragma: no cover — CPython always has it
    _c_make_scanner = None

_HEADER_SIZE = 4
MAX_FRAME = 64 << 20  # the largest frame either side accepts


class _ScanContext:
    """What `_json.make_scanner` reads from a `json.JSONDecoder`: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__
    memo = None


def _not_serializable(o):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


if _c_make_scanner is not None:
    _scan = _c_make_scanner(_ScanContext())


def _loads(data):
    """json.loads of a frame's UTF-8 body."""
    if _c_make_scanner is None:
        import json  # noqa: PLC0415

        return json.loads(data)
    text = data.decode("utf-8").strip(" \t\n\r")
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        import json  # noqa: PLC0415 — the package's error, with its position

        return json.loads(text)
    return value


def _dumps(value, ensure_ascii=True):
    """json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=...)."""
    if _c_make_scanner is None:
        import json  # noqa: PLC0415

        return json.dumps(value, allow_nan=False, ensure_ascii=ensure_ascii,
                          separators=(",", ":"))
    if isinstance(value, str):
        return (_c_str_ascii if ensure_ascii else _c_str)(value)
    # A new encoder (and circular-reference memo) per value, as json.dumps makes: a failed
    # encode may leave entries in the memo.
    encoder = _c_make_encoder({}, _not_serializable, _c_str_ascii if ensure_ascii else _c_str,
                              None, ":", ",", False, False, False)
    return "".join(encoder(value, 0))


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
    # importlib.util's own two functions, taken from the import system's frozen modules that
    # every CPython has loaded already: importing importlib.util costs ~10 ms (contextlib,
    # functools), and even `from importlib._bootstrap import ...` imports the `importlib`
    # package and `warnings` (~1 ms of CPU in a sandbox).
    bootstrap = sys.modules.get("_frozen_importlib")
    external = sys.modules.get("_frozen_importlib_external")
    if bootstrap is not None and external is not None:
        module_from_spec = bootstrap.module_from_spec
        spec_from_file_location = external.spec_from_file_location
    else:  # pragma: no cover — an interpreter without them
        from importlib.util import module_from_spec, spec_from_file_location  # noqa: PLC0415

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such Python module: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else "_abx_commands"
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(1, folder)
    spec = spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} (not a Python source file?)")
    module = module_from_spec(spec)
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
        head = self._in.read(_HEADER_SIZE)
        if len(head) < _HEADER_SIZE:
            return None  # the server closed its end
        n = int.from_bytes(head, "big")
        if n > MAX_FRAME:
            raise ValueError(f"frame of {n} bytes is over the limit of {MAX_FRAME}")
        body = self._in.read(n)
        if len(body) < n:
            return None
        return _loads(body)

    def write(self, body):
        data = len(body).to_bytes(_HEADER_SIZE, "big") + body
        view = memoryview(data)
        while view:
            k = os.write(self._fd, view)
            view = view[k:]


def _encode_result(name, value):
    try:
        data = _dumps(value, ensure_ascii=False).encode("utf-8")
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
    return _dumps({"error": message, "type": type_name}).encode()


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
    # No .pyc writes: each sandbox starts on a fresh writable layer, so a module's bytecode
    # written there would serve only this sandbox's worker restarts, and writing it (the
    # __pycache__ folder copied up into the layer, the file) is on the create's path (issue 37).
    # A `server.python` template has its module's .pyc from the build (docs/python.md).
    sys.dont_write_bytecode = True
    chan = _Channel(fd)
    hello, err = load(path)
    # The pid tells a server that did not start this process (envd did: --python-fd) which
    # process it talks to.
    chan.write(_dumps(dict(hello if err is None else err, pid=os.getpid())).encode())
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
    sys.stdout.write(_dumps(hello, ensure_ascii=False) + "\n")
    return 0


USAGE = "usage: worker.py --fd N MODULE.py | --describe MODULE.py"


def main(argv):
    if len(argv) == 3 and argv[0] == "--fd" and argv[1].isdigit():
        return serve(int(argv[1]), argv[2])
    if len(argv) == 2 and argv[0] == "--describe":
        return describe(argv[1])
    sys.stderr.write(USAGE + "\n")
    return 2
