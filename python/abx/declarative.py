"""``abx.sandbox``: the decorator layer of design record 000 (``_SandboxFactory``).

``sandbox`` is one callable object with two uses::

    @sandbox.register                 # a function becomes the command of its name
    def demo(x: int, y: str = "hello") -> str: ...

    @sandbox(template="mytools")      # a class or function is bound to a template
    class Tools: ...

``sandbox.register`` reads the function's signature (abx.server.registry.args_from_signature),
keeps the command in the factory's own table and registers it, one way, into
``abx.server.registry.default_registry()`` — the registry ``abx-server --python`` serves. The
server layer never imports this module. Mistakes (an unsupported annotation, *args, a name taken
twice, registering after the server started) raise at once, naming the function.
"""

from __future__ import annotations

from .server.registry import (
    RegisteredCommand,
    args_from_signature,
    default_registry,
    description_of,
)

__all__ = ["sandbox"]

TEMPLATE_ATTR = "__abx_template__"


class _RegisterProxy:
    """``sandbox.register``: bare (``@sandbox.register``) or with options
    (``@sandbox.register(name="other", description="…")``)."""

    def __init__(self, factory: "_SandboxFactory") -> None:
        self._factory = factory

    def __call__(
        self,
        fn: Optional[Callable[..., Any]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
    ) -> Any:
        if fn is None:
            return lambda f: self(f, name=name, description=description)
        if not callable(fn):
            raise TypeError(f"sandbox.register: {fn!r} is not a function")
        cmd_name = name or fn.__name__
        desc = description_of(fn) if description is None else description
        args = args_from_signature(fn)
        # One-way bridge into the server layer's registry: it raises for a taken name or a
        # frozen registry, before the factory's own table changes.
        cmd = default_registry().register(cmd_name, fn, args=args, description=desc)
        self._factory._registry[cmd_name] = cmd
        return fn


class _SandboxFactory:
    """The ``sandbox`` object: ``sandbox.register`` and ``sandbox(template=…)``."""

    def __init__(self) -> None:
        self._registry: Dict[str, RegisteredCommand] = {}
        self.register = _RegisterProxy(self)

    def __call__(self, obj: Any = None, *, template: Optional[str] = None) -> Any:
        """``@sandbox(template="mytools")`` binds a class or function to a template: the object
        is returned unchanged with ``__abx_template__`` set (``template_of`` reads it)."""
        if obj is not None:
            if template is None:
                raise TypeError("use @sandbox(template=\"<template id>\") or @sandbox.register")
            return self(template=template)(obj)
        if not isinstance(template, str) or not template:
            raise TypeError("sandbox(template=…) needs a template id (a non-empty string)")

        def bind(target: Any) -> Any:
            try:
                setattr(target, TEMPLATE_ATTR, template)
            except (AttributeError, TypeError):
                raise TypeError(f"sandbox(template=…): cannot bind {target!r}") from None
            return target

        return bind

    @staticmethod
    def template_of(obj: Any) -> Optional[str]:
        """The template ``obj`` was bound to with ``@sandbox(template=…)``, or None."""
        return getattr(obj, TEMPLATE_ATTR, None)

    def commands(self) -> Dict[str, RegisteredCommand]:
        """What ``sandbox.register`` registered in this process, by name."""
        return dict(sorted(self._registry.items()))


sandbox = _SandboxFactory()
