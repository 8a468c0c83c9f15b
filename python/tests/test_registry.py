"""abx.server.registry and abx.sandbox (the design records' API), stdlib only. pytest."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from abx.declarative import _SandboxFactory  # noqa: E402
from abx.server import registry as reg_mod  # noqa: E402
from abx.server.registry import (  # noqa: E402
    CommandArg,
    CommandRegistry,
    RegisteredCommand,
    args_from_signature,
    default_registry,
)

WORKER = os.path.join(ROOT, "abx", "server", "worker.py")


def test_command_arg_validates_its_type():
    assert CommandArg("x", "integer").type == "integer"
    with pytest.raises(ValueError, match="unknown type 'list'"):
        CommandArg("x", "list")
    with pytest.raises(ValueError, match="required argument cannot have a default"):
        CommandArg("x", "string", required=True, default="a")
    with pytest.raises(TypeError, match="not of type integer"):
        CommandArg("x", "integer", default=True)
    assert CommandArg("x", "float", default=1).default == 1.0


def test_register_get_list_all_and_freeze():
    reg = CommandRegistry()

    def add(a: int, b: int = 2) -> int:
        """Add."""
        return a + b

    cmd = reg.register("add", add, description="Add two.")
    assert isinstance(cmd, RegisteredCommand)
    assert reg.get("add") is cmd and cmd.fn is add  # a direct reference, no source text
    assert [a.to_json() for a in cmd.args] == [
        {"name": "a", "type": "integer", "required": True, "default": None, "description": ""},
        {"name": "b", "type": "integer", "required": False, "default": 2, "description": ""},
    ]
    assert reg.get("nope") is None
    reg.register("sub", lambda a, b: a - b, args=[CommandArg("a", "integer", True),
                                                  CommandArg("b", "integer", True)])
    assert list(reg.list_all()) == ["add", "sub"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("add", add)
    reg.freeze()
    with pytest.raises(RuntimeError, match="frozen"):
        reg.register("later", add)


def test_command_decorator_infers_from_the_signature():
    reg = CommandRegistry()

    @reg.command()
    def greet(name: str, loud: bool = False) -> str:
        """Say hello."""
        return ("HELLO " if loud else "hello ") + name

    @reg.command("other-name")
    def f(x: float) -> float:
        return x

    assert greet("a") == "hello a"  # returned unchanged
    g = reg.get("greet")
    assert g.description == "Say hello."
    assert [(a.name, a.type, a.required, a.default) for a in g.args] == [
        ("name", "string", True, None), ("loud", "boolean", False, False)]
    assert reg.get("other-name").args[0].type == "float"


def _list_param(x: list):
    pass


def _unannotated(x):
    pass


def _varargs(*xs: int):
    pass


def _varkw(**kw: int):
    pass


def _positional_only(x: int, /):
    pass


def _bad_default(x: int = "a"):
    pass


def _string_dict(x: "dict"):
    pass


@pytest.mark.parametrize(
    "fn, needle",
    [
        (_list_param, "parameter 'x': unsupported type list"),
        (_unannotated, "parameter 'x': no type annotation"),
        (_varargs, "parameter 'xs': *xs is not supported"),
        (_varkw, "parameter 'kw': **kw is not supported"),
        (_positional_only, "parameter 'x': positional-only"),
        (_bad_default, "parameter 'x': default 'a' is not of type integer"),
        (_string_dict, "parameter 'x': unsupported type dict"),
    ],
)
def test_unsupported_signatures_name_function_and_parameter(fn, needle):
    with pytest.raises(TypeError) as e:
        args_from_signature(fn)
    assert f"command '{fn.__name__}', " + needle in str(e.value)


def test_string_annotations_are_read_by_name_not_evaluated():
    def f(x: "int", y: "str" = "a"):
        return x

    assert [a.type for a in args_from_signature(f)] == ["integer", "string"]


def test_default_registry_is_a_singleton():
    assert default_registry() is default_registry()
    assert reg_mod.default_registry() is default_registry()


def test_sandbox_register_bridges_into_the_default_registry():
    factory = _SandboxFactory()

    @factory.register
    def pytest_bridge_demo(x: int, y: str = "hello") -> str:
        """Run a demo command."""
        return f"{x}: {y}"

    @factory.register(name="pytest-bridge-renamed", description="Renamed.")
    def other() -> int:
        return 1

    assert pytest_bridge_demo(42, "world") == "42: world"
    server = default_registry().get("pytest_bridge_demo")
    assert server is not None and server.fn is pytest_bridge_demo
    assert server.description == "Run a demo command."
    assert set(factory.commands()) == {"pytest_bridge_demo", "pytest-bridge-renamed"}
    assert default_registry().get("pytest-bridge-renamed").description == "Renamed."
    with pytest.raises(ValueError, match="registered twice"):
        factory.register(pytest_bridge_demo)


def test_sandbox_template_binding():
    factory = _SandboxFactory()

    @factory(template="mytools")
    class Tools:
        pass

    @factory(template="other")
    def fn():
        pass

    assert factory.template_of(Tools) == "mytools"
    assert factory.template_of(fn) == "other"
    assert factory.template_of(object()) is None
    with pytest.raises(TypeError):
        factory(template="")


def test_from_abx_import_sandbox_never_imports_the_sdk():
    out = subprocess.run(
        [sys.executable, "-c",
         "import sys; from abx import sandbox; print('abx.sdk' in sys.modules)"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _tools(tmp_path, text):
    p = tmp_path / "tools.py"
    p.write_text(text)
    return str(p)


def test_worker_describe_prints_the_schema(tmp_path):
    path = _tools(tmp_path, (
        "from abx import sandbox\n"
        "@sandbox.register\n"
        "def demo(x: int, y: str = 'hello') -> str:\n"
        "    '''Run a demo command.'''\n"
        "    return f'{x}: {y}'\n"))
    out = subprocess.run([sys.executable, WORKER, "--describe", path],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"commands": [{
        "name": "demo", "description": "Run a demo command.", "args": [
            {"name": "x", "type": "integer", "required": True, "default": None,
             "description": ""},
            {"name": "y", "type": "string", "required": False, "default": "hello",
             "description": ""}]}]}


def test_worker_describe_fails_with_the_traceback(tmp_path):
    path = _tools(tmp_path, "from abx import sandbox\n\ndef broken(:\n")
    out = subprocess.run([sys.executable, WORKER, "--describe", path],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert "SyntaxError" in out.stderr and 'tools.py", line 3' in out.stderr
    assert "worker.py" not in out.stderr  # the worker's own frames are left out


def test_worker_protocol_calls_and_errors(tmp_path):
    import socket
    import struct

    path = _tools(tmp_path, (
        "from abx import sandbox\n"
        "n = 0\n"
        "@sandbox.register\n"
        "def bump(by: int = 1) -> int:\n"
        "    global n\n"
        "    n += by\n"
        "    return n\n"
        "@sandbox.register\n"
        "def bad() -> int:\n"
        "    raise ValueError('nope')\n"
        "@sandbox.register\n"
        "def odd() -> int:\n"
        "    return float('nan')\n"))
    ours, theirs = socket.socketpair()
    # Python would write the module's bytecode here; the serving worker does not (each sandbox
    # starts on a fresh layer: the write would only cost its create time).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen([sys.executable, WORKER, "--fd", str(theirs.fileno()), path],
                            pass_fds=[theirs.fileno()], env=env)
    theirs.close()
    f = ours.makefile("rwb")

    def read():
        (n,) = struct.unpack(">I", f.read(4))
        return json.loads(f.read(n))

    def send(obj):
        body = json.dumps(obj).encode()
        f.write(struct.pack(">I", len(body)) + body)
        f.flush()

    try:
        assert [c["name"] for c in read()["commands"]] == ["bad", "bump", "odd"]
        assert not (tmp_path / "__pycache__").exists()
        for want in (1, 2, 3):
            send({"call": "bump", "kwargs": {}})
            assert read() == {"result": want}
        send({"call": "bad", "kwargs": {}})
        assert read() == {"error": "nope", "type": "ValueError"}
        send({"call": "odd", "kwargs": {}})
        answer = read()
        assert answer["type"] == "TypeError" and "JSON cannot carry" in answer["error"]
    finally:
        f.close()
        ours.close()
        assert proc.wait(timeout=10) == 0  # end of input ends the worker


def module_level_without_doc(a: int, b: str = "x") -> str:
    return b


def _shapes():
    """Functions of every parameter shape, with and without defaults, annotations as objects and
    as strings (PEP 563), and callables that are not plain functions."""
    import functools

    def plain(x: int, y: str = "a") -> str:
        """Doc."""
        return y

    def kwonly(x: int, *, z: float = 1.5, w: bool) -> None:
        pass

    def posonly(a: int, /, b: int) -> None:
        pass

    def star(a: int, *rest: int, k: str = "k", **extra: int) -> None:
        pass

    def unannotated(a, b=2):
        pass

    def strings(a: "int", b: "str" = "x") -> "str":
        return b

    def none_default(a: int = None):
        pass

    @functools.wraps(plain)
    def wrapped(*args, **kwargs):
        return plain(*args, **kwargs)

    class WithCall:
        def __call__(self, q: int) -> int:
            return q

        def method(self, m: str) -> str:
            return m

    return [module_level_without_doc, plain, kwonly, posonly, star, unannotated, strings, none_default, wrapped,
            functools.partial(plain, 1), WithCall(), WithCall().method, lambda v: v]


@pytest.mark.parametrize("fn", _shapes(), ids=lambda f: getattr(f, "__name__", type(f).__name__))
def test_parameters_read_as_inspect_signature_reads_them(fn):
    # The registry reads plain functions from their code objects so that the worker does not
    # import inspect at start-up; what it reads must be what inspect.signature says.
    import inspect

    expected = [
        (
            p.name,
            int(p.kind),
            reg_mod._EMPTY if p.annotation is p.empty else p.annotation,
            reg_mod._EMPTY if p.default is p.empty else p.default,
        )
        for p in inspect.signature(fn).parameters.values()
    ]
    assert reg_mod._parameters(fn) == expected


@pytest.mark.parametrize("fn", _shapes(), ids=lambda f: getattr(f, "__name__", type(f).__name__))
def test_descriptions_read_as_inspect_getdoc_reads_them(fn):
    import inspect

    assert reg_mod.description_of(fn) == (inspect.getdoc(fn) or "")


def test_docstrings_are_cleaned_as_inspect_cleans_them():
    import inspect

    for doc in ["One line.", "  Leading.\n    indented\n      more\n\n", "\n\n  First\n\tTab\n  x\n",
                "", "\n", "a\n  \n    b"]:
        def f():
            pass

        f.__doc__ = doc
        assert reg_mod.description_of(f) == inspect.cleandoc(doc), repr(doc)


def test_the_worker_starts_without_inspect_typing_or_dataclasses(tmp_path):
    # Issue 37: create -> first call waits for the worker's imports. A module registering
    # commands costs the worker none of these: in a sandbox `re` (with `enum`, `functools`) took
    # ~13 ms, importlib.util (`contextlib`) ~10 ms, `inspect` ~10 ms, of a start of ~70 ms.
    module = tmp_path / "tools.py"
    module.write_text(
        "from abx import sandbox\n\n\n@sandbox.register\n"
        "def demo(x: int, y: str = 'hello') -> str:\n    \"\"\"Demo.\"\"\"\n    return f'{x}: {y}'\n"
        "\n\n@sandbox.register\ndef undocumented(x: int) -> int:\n    return x\n"
    )
    # -X importtime names every module the worker's start imports, on stderr.
    out = subprocess.run(
        [sys.executable, "-X", "importtime", WORKER, "--describe", str(module)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"name":"demo"' in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "_json" in imported and "abx.server.registry" in imported  # the check sees imports
    heavy = {"inspect", "typing", "dataclasses", "traceback", "ast", "re", "json", "enum",
             "functools", "contextlib", "importlib", "importlib.util", "warnings", "threading",
             "struct"}
    assert not imported & heavy, sorted(imported & heavy)


def test_the_workers_json_codec_is_json_dumps_and_loads():
    # The worker encodes with `_json` directly (no `json` package at start-up): the same text
    # as json.dumps(allow_nan=False, separators=(",", ":")), the same errors.
    from abx.server import worker  # noqa: PLC0415

    values = [0, -7, 2**70, 1.5, -0.0, 1e300, "", "plain", "naïve \u2603 \U0001f600", 'q"\\\n\t',
              True, False, None, [], {}, [1, [2, [3, {"k": ["v", None]}]]],
              {"b": 1, "a": {"ü": [1.25, "x"]}}, (1, 2)]
    for v in values:
        for ascii_only in (True, False):
            want = json.dumps(v, allow_nan=False, ensure_ascii=ascii_only, separators=(",", ":"))
            assert worker._dumps(v, ensure_ascii=ascii_only) == want, v
            assert worker._loads(want.encode("utf-8")) == json.loads(want), want
    assert worker._loads(b' {"a": [1, 2.5, "\\u00fc"]}\n') == {"a": [1, 2.5, "\u00fc"]}
    for bad in (float("nan"), float("inf"), [float("-inf")]):
        with pytest.raises(ValueError):
            worker._dumps(bad)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        worker._dumps(loop)
    shared = [1]
    assert worker._dumps([shared, shared]) == "[[1],[1]]"  # a failed encode left no memo
    with pytest.raises(TypeError, match="not JSON serializable"):
        worker._dumps({"x": object()})
    for bad in (b"", b"{", b"[1,]", b"{} x", b'"\x01"'):
        with pytest.raises(json.JSONDecodeError):
            worker._loads(bad)
