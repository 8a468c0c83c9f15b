"""Layer 1 without any server: local template.yaml files, custom-command rendering and
quoting, configuration from the environment."""

import shlex
import subprocess

import pytest

from abx.sdk import (AbxError, CommandNotFound, ConnectionConfig, InvalidArguments, NotFound,
                     discover_local)
from abx.sdk import templates as tpl

TEMPLATE = """id: tools
capabilities: [shell, files]
custom_commands:
  greet:
    description: Greet someone.
    command: "printf 'hello %s\\n' {name}"
    args:
      - {name: name, type: string, required: true, description: Who}
      - {name: times, type: integer, default: 1}
  flags:
    command: "echo {{literal}} {on} {ratio}"
    args: [{name: on, type: boolean}, {name: ratio, type: float, default: 0.5}]
"""


@pytest.fixture
def home(tmp_path):
    d = tmp_path / "templates" / "tools"
    d.mkdir(parents=True)
    (d / "template.yaml").write_text(TEMPLATE)
    return tmp_path


def test_layer1_yaml_needs_no_server_and_types_every_argument(home):
    # A control plane that does not exist: Layer 1 never touches it.
    cfg = ConnectionConfig(api_url="http://127.0.0.1:9", api_key="wrong", home=home)
    cmds = discover_local("tools", config=cfg)
    assert [c["name"] for c in cmds] == ["flags", "greet"]
    greet = cmds[1]
    assert greet["source"] == "yaml"
    assert greet["description"] == "Greet someone."
    assert greet["command"] == "printf 'hello %s\n' {name}"  # YAML's \n: a newline
    assert greet["args"] == [
        {"name": "name", "type": "string", "required": True, "default": None,
         "description": "Who"},
        {"name": "times", "type": "integer", "required": False, "default": 1,
         "description": ""},
    ]
    assert all("type" in a for c in cmds for a in c["args"])
    t = tpl.find_local_template(home, "tools")
    assert t.capabilities == frozenset({"shell", "files"})


def test_unknown_local_template_is_not_found(home):
    with pytest.raises(NotFound):
        discover_local("nope", config=ConnectionConfig(home=home))


def test_every_value_is_shell_quoted(home):
    greet = tpl.find_local_template(home, "tools").custom_commands["greet"]
    evil = "x'; rm -rf / #"
    cmd = tpl.render_custom_command(greet, {"name": evil})
    assert cmd == "printf 'hello %s\n' " + shlex.quote(evil)
    # The shell sees exactly one word with the value in it.
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=True)
    assert out.stdout == f"hello {evil}\n"
    for v in ("$(id)", "`id`", "a\nb", "*", "-n", ""):
        out = subprocess.run(["/bin/sh", "-c", tpl.render_custom_command(greet, {"name": v})],
                             capture_output=True, text=True, check=True)
        assert out.stdout == f"hello {v}\n"


def test_non_strings_and_absent_optionals(home):
    flags = tpl.find_local_template(home, "tools").custom_commands["flags"]
    assert tpl.render_custom_command(flags, {"on": True}) == "echo {literal} true 0.5"
    assert tpl.render_custom_command(flags, {"ratio": 2}) == "echo {literal} '' 2.0"


@pytest.mark.parametrize("kwargs,field", [
    ({}, "name"),                               # missing required
    ({"name": "a", "extra": 1}, "extra"),       # unknown
    ({"name": 5}, "name"),                      # not a string
    ({"name": "a", "times": "3"}, "times"),     # not an integer
    ({"name": "a", "times": True}, "times"),    # a bool is not an integer
    ({"name": "a", "times": 1.0}, "times"),     # nor is 1.0
    ({"name": "a\0b"}, "name"),                 # no shell word holds NUL
])
def test_bad_arguments_are_refused_before_anything_runs(home, kwargs, field):
    greet = tpl.find_local_template(home, "tools").custom_commands["greet"]
    with pytest.raises(InvalidArguments) as e:
        tpl.render_custom_command(greet, kwargs)
    assert e.value.field == field


@pytest.mark.parametrize("command", [
    "echo '{x}'", 'echo "{x}"', "echo $ {x} # {x}", "echo ${x}", "echo \\{x}", "echo {y}",
])
def test_unsafe_placeholders_are_refused(command):
    e = tpl.CommandEntry("c", source="yaml", command=command, args=[tpl.ArgSpec("x")])
    with pytest.raises(InvalidArguments):
        tpl.validate_custom_command(e)


def test_unsafe_template_file_is_an_error_when_asked_for(tmp_path):
    d = tmp_path / "templates" / "bad"
    d.mkdir(parents=True)
    (d / "template.yaml").write_text(
        "id: bad\ncustom_commands:\n  c: {command: \"echo '{x}'\", args: [{name: x, type: string}]}\n")
    with pytest.raises(InvalidArguments):
        tpl.find_local_template(tmp_path, "bad")


def test_config_from_env_like_libabx():
    c = ConnectionConfig.from_env({"E2B_API_URL": "http://e2b:1", "E2B_API_KEY": "k1",
                                   "ABX_API_KEY": "k2", "ABX_REQUEST_TIMEOUT_MS": "1500"})
    assert (c.api_url, c.api_key, c.request_timeout) == ("http://e2b:1", "k2", 1.5)
    c = ConnectionConfig.from_env({"E2B_DOMAIN": "example.com"})
    assert c.api_url == "https://api.example.com"
    c = ConnectionConfig.from_env({"ABX_ACCESS_KEY_ID": "AK", "ABX_SECRET_ACCESS_KEY": "SK"})
    assert c.uses_signing()
    assert ConnectionConfig.from_env({}).api_url == "http://127.0.0.1:3000"


def test_command_not_found_is_typed():
    e = tpl.command_not_found("t", "x")
    assert isinstance(e, CommandNotFound) and isinstance(e, AbxError) and e.type == "NotFound"
