"""abx: local-first agent sandboxes.

Inside a sandbox, ``from abx import sandbox`` is all a command module needs::

    from abx import sandbox

    @sandbox.register
    def demo(x: int, y: str = "hello") -> str:
        \"\"\"Run a demo command.\"\"\"
        return f"{x}: {y}"

``abx-server --python tools.py`` serves those functions (docs/python.md). That import touches
only the standard library and ``abx.server.registry``: the host SDK (``abx.sdk``: ``Sandbox``,
``AsyncSandbox`` and its exceptions) is imported lazily, on first use of one of its names.
"""

from .declarative import sandbox

__all__ = ["sandbox"]

# Every other public name (Sandbox, AsyncSandbox, the SDK's exception classes) belongs to the
# host SDK, abx.sdk, and is imported from it on first access (PEP 562): a command module inside a
# sandbox never pays for, or depends on, the SDK.


def __getattr__(name):
    if name.startswith("_") or name in ("sdk", "server", "declarative"):
        raise AttributeError(f"module 'abx' has no attribute '{name}'")
    import importlib  # noqa: PLC0415

    try:
        sdk = importlib.import_module(__name__ + ".sdk")
    except ModuleNotFoundError as e:
        if e.name != __name__ + ".sdk":
            raise
        raise AttributeError(
            f"module 'abx' has no attribute '{name}' (the host SDK, abx.sdk, is not installed)"
        ) from None
    try:
        return getattr(sdk, name)
    except AttributeError:
        raise AttributeError(f"module 'abx' has no attribute '{name}'") from None
