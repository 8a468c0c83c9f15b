"""The in-sandbox half of abx's Python support (stdlib only, Python >= 3.9).

- ``abx.server.registry``: ``CommandArg``, ``RegisteredCommand``, ``CommandRegistry`` and
  ``default_registry()`` — the design records' standalone registry.
- ``abx.server.worker``: the process ``abx-server --python`` starts; it imports a command
  module, reports its registry and runs calls over a framed protocol (docs/python.md).

HTTP, auth, routing and argument validation are the C++ server's; nothing here listens.
"""

from .registry import CommandArg, CommandRegistry, RegisteredCommand, default_registry

__all__ = ["CommandArg", "CommandRegistry", "RegisteredCommand", "default_registry"]
