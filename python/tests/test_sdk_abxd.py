"""The host SDK against a real abxd (conftest.py starts it): sandboxes, processes, files,
registered commands of the built-in `demo` template (examples/commands/demo.cc), typed errors,
two-layer discovery, capabilities, custom commands, AK/SK signing and scoped tokens. Every
sandbox a test creates is killed when it ends (the `sandboxes` fixture)."""

import asyncio
import socket
import threading
import time

import pytest

from abx.sdk import (AbxError, AsyncSandbox, AuthError, CapabilityError, CommandFailed,
                     CommandNotFound, ConnectionConfig, InvalidArguments, NotFound, Sandbox,
                     Unavailable)


def wait_for_command_server(sbx, timeout=10.0):
    """abxd's create returns once the command server listens; a short retry covers a slow
    machine."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return sbx.server.list()
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_create_connect_commands_files_timeout_kill(sandboxes, cfg):
    sbx = sandboxes("base", metadata={"owner": "pytest"}, envs={"GREETING": "hi there"})
    assert sbx.id and sbx.template_id == "base"
    r = sbx.commands.run('echo "$GREETING"; echo oops >&2; exit 3')
    assert (r.exit_code, r.stdout, r.stderr) == (3, "hi there\n", "oops\n")
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("echo $X", envs={"X": "from envs"}).stdout == "from envs\n"

    sbx.files.write("/tmp/py/hello.txt", "héllo\n")
    assert sbx.files.read("/tmp/py/hello.txt") == "héllo\n"
    sbx.files.write("/tmp/py/blob", bytes(range(256)))
    assert sbx.files.read("/tmp/py/blob", format="bytes") == bytes(range(256))
    assert sbx.commands.run("cat /tmp/py/hello.txt").stdout == "héllo\n"
    with pytest.raises(NotFound):
        sbx.files.read("/tmp/py/missing")

    # connect: a second handle on the same sandbox, with its own access token.
    again = Sandbox.connect(sbx.id, timeout=120, config=cfg)
    assert again.id == sbx.id
    assert again.get_info().metadata.get("owner") == "pytest"
    assert again.files.read("/tmp/py/hello.txt") == "héllo\n"

    before = sbx.get_info().end_at
    sbx.set_timeout(600)
    after = sbx.get_info().end_at
    assert after > before, (before, after)

    assert sbx.kill() is True
    assert sbx.kill() is False  # already gone
    with pytest.raises(NotFound):
        Sandbox.connect(sbx.id, config=cfg)


def test_command_timeout(sandboxes):
    from abx.sdk import Timeout
    sbx = sandboxes("base")
    t0 = time.monotonic()
    with pytest.raises(Timeout):
        sbx.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - t0 < 15


def test_server_call_and_typed_errors(sandboxes):
    sbx = sandboxes("demo")
    wait_for_command_server(sbx)
    assert sbx.server.call("demo", x=42, y="world") == "42: world"
    assert sbx.server.call("demo", x=1) == "1: hello"
    assert sbx.server.call("add", a=2, b=40) == 42
    assert sbx.server.call("repeat", word="ab", times=2, upper=True) == ["AB", "AB"]
    assert sbx.server.call("noop") is None

    with pytest.raises(CommandNotFound) as e:
        sbx.server.call("nope")
    assert (e.value.status, e.value.type) == (404, "NotFound")
    assert "nope" in str(e.value)

    with pytest.raises(InvalidArguments) as e:
        sbx.server.call("demo", x="not a number")
    assert (e.value.status, e.value.type, e.value.field) == (400, "InvalidArgument", "x")
    with pytest.raises(InvalidArguments) as e:
        sbx.server.call("demo", y="no x")
    assert e.value.field == "x"
    with pytest.raises(InvalidArguments) as e:
        sbx.server.call("demo", x=1, z=2)
    assert e.value.field == "z"

    with pytest.raises(CommandFailed) as e:
        sbx.server.call("divide", a=1.0, b=0.0)
    assert (e.value.status, e.value.type) == (500, "std::domain_error")
    assert str(e.value) == "division by zero"

    # A wrong access token on the sandbox plane.
    with pytest.raises(AuthError) as e:
        sbx.with_access_token("wrong").server.call("demo", x=1)
    assert e.value.status == 401


def test_bad_api_key_is_auth_error(abxd, client_home):
    bad = abxd.config(api_key="e2b_" + "0" * 40, home=client_home)
    with pytest.raises(AuthError) as e:
        Sandbox.create("base", config=bad)
    assert (e.value.status, e.value.type) == (401, "Unauthenticated")


def test_list_commands_two_layers(sandboxes, client_home):
    # Layer 1: a local template.yaml for the same template id adds a custom command; Layer 2
    # (the live server) lists the registered ones. One answer, `type` on every argument.
    d = client_home / "templates" / "demo"
    d.mkdir(parents=True)
    (d / "template.yaml").write_text("""id: demo
custom_commands:
  shout:
    description: Upper-case a word.
    command: "echo {word} | tr a-z A-Z"
    args: [{name: word, type: string, required: true}]
""")
    sbx = sandboxes("demo")
    wait_for_command_server(sbx)
    cmds = {c["name"]: c for c in sbx.list_commands()}
    assert {"demo", "add", "divide", "shout"} <= set(cmds)
    assert cmds["demo"]["source"] == "remote"
    assert cmds["demo"]["description"] == "Run a demo command."
    assert cmds["demo"]["args"] == [
        {"name": "x", "type": "integer", "required": True, "default": None, "description": ""},
        {"name": "y", "type": "string", "required": False, "default": "hello",
         "description": ""}]
    assert cmds["shout"]["source"] == "yaml"
    assert all("type" in a for c in cmds.values() for a in c["args"])
    assert list(cmds) == sorted(cmds)
    assert sbx.run("shout", word="abc").stdout == "ABC\n"

    # Layer 1 alone: no request at all.
    local = sbx.list_commands(remote=False)
    assert [c["name"] for c in local] == ["shout"]

    # Discovery never reaches further than execution: a bad token fails Layer 2 too.
    with pytest.raises(AuthError):
        sbx.with_access_token("wrong").list_commands()


class Recorder:
    """A TCP listener that counts connections and closes them: where a request would go."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            c.close()


def test_capabilities_are_checked_before_any_request(abxd, client_home):
    rec = Recorder()
    # `slim` is known to this client only through the platform: capabilities [shell].
    cfg = abxd.config(home=client_home, sandbox_url=rec.url, max_retries=0)
    sbx = Sandbox.create("slim", timeout=60, config=cfg)
    try:
        assert sbx.capabilities == frozenset({"shell"})
        assert isinstance(sbx.capabilities, frozenset)
        with pytest.raises(CapabilityError) as e:
            sbx.files.read("/etc/hostname")
        assert e.value.type == "MissingCapability" and "'files'" in str(e.value)
        with pytest.raises(CapabilityError):
            sbx.files.write("/tmp/x", "y")
        assert rec.connections == 0  # nothing was sent to envd
        # The control: a call the template allows does go out (to the recorder, which fails it).
        with pytest.raises(AbxError):
            sbx.commands.run("true")
        assert rec.connections >= 1
    finally:
        sbx.kill()
        rec.sock.close()


def test_custom_command_values_are_quoted(sandboxes):
    # `slim`'s custom commands come from the platform (the client home is empty).
    sbx = sandboxes("slim")
    evil = "'; touch /tmp/pwned; echo '"
    r = sbx.run("greet", name=evil)
    assert (r.exit_code, r.stdout) == (0, f"hello {evil}\n")
    assert sbx.commands.run("test -e /tmp/pwned && echo yes || echo no").stdout == "no\n"
    r = sbx.run("greet", name="x'; rm -rf / #")
    assert r.stdout == "hello x'; rm -rf / #\n"
    assert sbx.commands.run("test -d /usr/bin && echo intact").stdout == "intact\n"
    r = sbx.run("echo_args", a="$(id) `id` *", flag=True)
    assert r.stdout == "[$(id) `id` *]\n[7]\n[true]\n[]\n"
    assert sbx.render("echo_args", a="x", n=3) == "printf '[%s]\n' x 3 false ''"  # YAML's \n: a newline
    with pytest.raises(InvalidArguments) as e:
        sbx.run("greet", name=3)
    assert e.value.field == "name"
    with pytest.raises(CommandNotFound):
        sbx.run("nope")


def test_aksk_signing_against_abxd(abxd, client_home):
    ak, sk = abxd.access_key("pysdk")
    cfg = ConnectionConfig(api_url=abxd.url, access_key_id=ak, secret_access_key=sk,
                           home=client_home)
    with Sandbox.create("demo", timeout=60, config=cfg) as sbx:  # POST with a JSON body
        wait_for_command_server(sbx)
        assert sbx.server.call("demo", x=7, y="signed") == "7: signed"
        assert any(s.sandbox_id == sbx.id for s in Sandbox.list(config=cfg))  # GET + query
        sbx.set_timeout(120)
        tok = sbx.scoped_token(["add"], ttl=60)  # signed token minting
        assert tok
    assert Sandbox.kill_id(sbx.id, config=cfg) is False  # signed DELETE: already gone
    wrong = ConnectionConfig(api_url=abxd.url, access_key_id=ak, secret_access_key="0" * 64,
                             home=client_home)
    with pytest.raises(AuthError) as e:
        Sandbox.list(config=wrong)
    assert e.value.status == 401


def test_scoped_token(sandboxes):
    sbx = sandboxes("demo")
    wait_for_command_server(sbx)
    tok = sbx.scoped_token(["demo"], ttl=120)
    scoped = sbx.with_access_token(tok)
    assert scoped.server.call("demo", x=5) == "5: hello"
    with pytest.raises(CommandNotFound):
        scoped.server.call("add", a=1, b=2)  # outside the token: indistinguishable from absent
    assert [c.name for c in scoped.server.list()] == ["demo"]
    assert [c["name"] for c in scoped.list_commands() if c["source"] == "remote"] == ["demo"]
    assert sbx.server.call("add", a=1, b=2) == 3  # the full token still runs everything


def test_async_sandbox(cfg):
    async def main():
        sbx = await AsyncSandbox.create("demo", timeout=60, config=cfg)
        try:
            assert isinstance(sbx.capabilities, frozenset)
            await asyncio.to_thread(wait_for_command_server, sbx.sync)
            results = await asyncio.gather(*(sbx.server.call("add", a=i, b=1) for i in range(8)))
            assert results == [i + 1 for i in range(8)]
            assert await sbx.server.call("demo", x=42, y="world") == "42: world"
            r = await sbx.commands.run("echo async")
            assert r.stdout == "async\n"
            await sbx.files.write("/tmp/a", "b")
            assert await sbx.files.read("/tmp/a") == "b"
            with pytest.raises(CommandNotFound):
                await sbx.server.call("nope")
            await sbx.set_timeout(90)
        finally:
            assert await sbx.kill() is True

    asyncio.run(main())
