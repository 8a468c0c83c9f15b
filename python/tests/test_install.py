"""The package installs offline, as docs/python.md says: a venv over the system site (Debian's
pip refuses the system one, PEP 668) and ``pip install --no-index --no-build-isolation``, with
Debian's pip, setuptools and wheel only; the installed copy imports without PYTHONPATH."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # python/


def test_pip_install_offline_into_a_venv(tmp_path):
    # A copy: an in-tree build would leave build/ and abx.egg-info in the source tree.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
    env["PIP_NO_INDEX"] = "1"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, env=env)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "--quiet", str(src)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = (
        "import abx, abx.server.registry, abx.sdk\n"
        "from abx import Sandbox, AsyncSandbox, sandbox\n"
        "print(abx.__file__)\n"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(venv)), out.stdout
