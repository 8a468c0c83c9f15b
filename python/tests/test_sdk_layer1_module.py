"""Layer 1 from a Python command module: abx.sdk reads a module's commands locally (no server,
no auth) through the in-sandbox worker's documented describe mode,
`python3 -m abx.server.worker --describe MODULE.py` (python/abx/server/worker.py)."""

import importlib.util

import pytest

from abx.sdk import ConnectionConfig, InvalidArguments, describe_module, discover_local

try:
    HAVE_WORKER = importlib.util.find_spec("abx.server.worker") is not None
except ImportError:
    HAVE_WORKER = False

pytestmark = pytest.mark.skipif(not HAVE_WORKER,
                                reason="abx.server.worker (the in-sandbox side) is not installed")

TOOLS = '''
from abx import sandbox

@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"

@sandbox.register
def scale(value: float, on: bool = False) -> float:
    return value
'''


def test_module_commands_listed_locally_with_types(tmp_path):
    mod = tmp_path / "tools.py"
    mod.write_text(TOOLS)
    entries = {e.name: e for e in describe_module(str(mod))}
    assert set(entries) == {"demo", "scale"}
    demo = entries["demo"]
    assert demo.source == "registered"
    assert demo.description == "Run a demo command."
    assert [(a.name, a.type, a.required, a.default) for a in demo.args] == [
        ("x", "integer", True, None), ("y", "string", False, "hello")]
    assert [(a.name, a.type) for a in entries["scale"].args] == [("value", "float"),
                                                                 ("on", "boolean")]
    # Merged with a local template's custom commands; no control plane is reachable.
    d = tmp_path / "home" / "templates" / "t"
    d.mkdir(parents=True)
    d.joinpath("template.yaml").write_text(
        "id: t\ncustom_commands:\n  hi: {command: 'echo hi'}\n")
    cfg = ConnectionConfig(api_url="http://127.0.0.1:9", home=tmp_path / "home")
    names = [(c["name"], c["source"]) for c in discover_local("t", [str(mod)], config=cfg)]
    assert names == [("demo", "registered"), ("hi", "yaml"), ("scale", "registered")]


def test_a_broken_module_is_an_error_with_its_message(tmp_path):
    mod = tmp_path / "bad.py"
    mod.write_text("from abx import sandbox\n\n@sandbox.register\ndef f(x: list) -> int:\n"
                   "    return 1\n")
    with pytest.raises(InvalidArguments) as e:
        describe_module(str(mod))
    assert "f" in str(e.value) and "x" in str(e.value)
