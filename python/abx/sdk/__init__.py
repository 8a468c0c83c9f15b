"""abx's host SDK: sandboxes, their processes and files, and registered commands, from Python.

::

    from abx.sdk import Sandbox

    with Sandbox.create("demo") as sbx:            # ABX_API_URL, ABX_API_KEY, … (ConnectionConfig)
        sbx.server.call("demo", x=42, y="world")    # -> "42: world"
        sbx.commands.run("echo hi").stdout          # -> "hi\\n"

``AsyncSandbox`` is the same API with coroutines. Pure standard library (Python >= 3.9); PyYAML
(Debian's python3-yaml) only to read local template.yaml files. See docs/python.md.
"""

from .aio import AsyncSandbox
from .config import ConnectionConfig
from .errors import (AbxError, AuthError, CapabilityError, CommandFailed, CommandNotFound,
                     Conflict, InvalidArguments, NotFound, Timeout, Unavailable)
from .sandbox import (CommandResult, CommandServer, Commands, Files, Sandbox, SandboxInfo,
                      describe_module, discover_local, merge_commands)
from .signing import sign
from .templates import ArgSpec, CommandEntry, render_custom_command

__all__ = [
    "AbxError", "ArgSpec", "AsyncSandbox", "AuthError", "CapabilityError", "CommandEntry",
    "CommandFailed", "CommandNotFound", "CommandResult", "CommandServer", "Commands", "Conflict",
    "ConnectionConfig", "Files", "InvalidArguments", "NotFound", "Sandbox", "SandboxInfo",
    "Timeout", "Unavailable", "describe_module", "discover_local", "merge_commands",
    "render_custom_command", "sign",
]
