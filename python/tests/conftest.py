"""Fixtures for the host SDK's tests: a real abxd (like tests/support/abxd.cc) with its own
home, a kernel-picked port on 127.0.0.1 and the API key it writes on first start; and a
sandbox factory that kills every sandbox a test made.

abxd: $ABXD_BIN (ctest sets it), else <repo>/build/dev/src/platform/abxd. Images:
$ABX_TEST_IMAGE_STORE, else $ABX_IMAGE_STORE, else abxd's default. Sandboxes resolve DNS
through 127.0.0.1:9 (nothing answers), so no test reaches a real resolver. Needs root, as every
abxd test does; without it the abxd tests skip, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from abx.sdk import ConnectionConfig, Sandbox  # noqa: E402

# Templates abxd serves besides its built-ins (base, demo, code-interpreter).
ABXD_TEMPLATES = {
    # No `files` capability; custom commands whose values must stay single shell words.
    "slim": """id: slim
capabilities: [shell]
custom_commands:
  greet:
    description: Greet.
    command: "printf 'hello %s\\n' {name}"
    args: [{name: name, type: string, required: true}]
  echo_args:
    description: Print each argument on its own line.
    command: "printf '[%s]\\n' {a} {n} {flag} {opt}"
    args:
      - {name: a, type: string, required: true}
      - {name: n, type: integer, default: 7}
      - {name: flag, type: boolean, default: false}
      - {name: opt, type: string}
""",
}


def run_id() -> str:
    return os.environ.get("ABX_TEST_RUN_ID", "")


def abxd_bin() -> str:
    b = os.environ.get("ABXD_BIN") or str(REPO / "build" / "dev" / "src" / "platform" / "abxd")
    return b


def make_temp_dir(prefix: str) -> Path:
    rid = run_id()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{rid}-" if rid else f"{prefix}-"))


class Abxd:
    def __init__(self, home: Path):
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.api_key = ""
        self.output: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [abxd_bin(), "--home", str(self.home), "--listen", "127.0.0.1:0",
                "--dns-upstream", "127.0.0.1:9"]
        store = os.environ.get("ABX_TEST_IMAGE_STORE") or os.environ.get("ABX_IMAGE_STORE")
        if store:
            argv += ["--image-store", store]
        log = open(self.home / "abxd.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 60
        port = None
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode("utf-8", "replace")
            if not line:
                break
            self.output.append(line)
            m = re.match(r"^listening on (\S+):(\d+)$", line.strip())
            if m:
                port = int(m.group(2))
                break
        if port is None:
            self.stop()
            raise RuntimeError("abxd did not start: " + "".join(self.output) +
                               (self.home / "abxd.log").read_text(errors="replace")[-4000:])
        self.port = port
        # Keep draining stdout so abxd never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.api_key = (self.home / "api_key").read_text().strip()
        assert self.api_key.startswith("e2b_"), self.api_key

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line.decode("utf-8", "replace"))

    def config(self, **overrides) -> ConnectionConfig:
        base = dict(api_url=self.url, api_key=self.api_key, max_retries=3)
        base.update(overrides)
        return ConnectionConfig(**base)

    def access_key(self, name: str = "pytest") -> tuple[str, str]:
        """`abxd access-keys create`: a fresh AK/SK pair in this home."""
        p = subprocess.run([abxd_bin(), "--home", str(self.home), "access-keys", "create",
                            "--name", name], capture_output=True, check=True, timeout=60)
        ak, sk = p.stdout.decode().split()
        return ak, sk

    def kill_all_sandboxes(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        cfg = self.config()
        try:
            for s in Sandbox.list(config=cfg):
                Sandbox.kill_id(s.sandbox_id, config=cfg)
        except Exception as e:  # report, never mask the test's own failure
            print(f"conftest: cleaning up sandboxes failed: {e}", file=sys.stderr)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)  # abxd drains connections for up to 10 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch):
    """Tests see only the configuration they build, never the runner's ABX_*/E2B_*."""
    for k in list(os.environ):
        if (k.startswith("ABX_") or k.startswith("E2B_")) and k not in (
                "ABX_TEST_RUN_ID", "ABX_TEST_IMAGE_STORE", "ABX_IMAGE_STORE", "ABX_DNS_UPSTREAM"):
            monkeypatch.delenv(k)


@pytest.fixture(scope="session")
def abxd():
    if os.geteuid() != 0:
        pytest.skip("abxd needs root for namespaces and cgroups")
    if not os.access(abxd_bin(), os.X_OK):
        pytest.fail(f"no abxd binary at {abxd_bin()} (set ABXD_BIN)")
    tmp = make_temp_dir("abx-pysdk")
    home = tmp / "abxd"
    for name, text in ABXD_TEMPLATES.items():
        (home / "templates" / name).mkdir(parents=True)
        (home / "templates" / name / "template.yaml").write_text(text)
    d = Abxd(home)
    d.start()
    try:
        yield d
    finally:
        d.kill_all_sandboxes()
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def client_home(tmp_path):
    """The client's own ABX_HOME: empty unless the test writes templates into it."""
    h = tmp_path / "client-home"
    (h / "templates").mkdir(parents=True)
    return h


@pytest.fixture
def cfg(abxd, client_home):
    return abxd.config(home=client_home)


@pytest.fixture
def sandboxes(cfg):
    """``sandboxes("demo")`` creates a sandbox; every one is killed when the test ends."""
    made: list[Sandbox] = []

    def create(template: str = "base", **kw):
        kw.setdefault("timeout", 120)
        kw.setdefault("config", cfg)
        s = Sandbox.create(template, **kw)
        made.append(s)
        return s

    yield create
    for s in made:
        try:
            s.kill()
        except Exception as e:
            print(f"conftest: kill {s.id}: {e}", file=sys.stderr)
