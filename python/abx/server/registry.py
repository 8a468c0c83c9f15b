"""The standalone command registry (design record 003), stdlib only.

A ``RegisteredCommand`` is a name, a direct reference to the function (never source text: nothing
here calls ``exec`` or ``eval``), an argument schema of ``CommandArg`` and a description. The
registry is filled while a command module is imported — by ``CommandRegistry.register``, the
``command()`` decorator, or ``abx.sandbox.register`` (which bridges one way into
``default_registry()``) — and frozen before the first call; ``register`` then raises
``RuntimeError``.

Argument types are exactly the four scalars of the C++ registry (``abx/registry/arg_type.h``):
``str`` → ``"string"``, ``int`` → ``"integer"``, ``float`` → ``"float"``, ``bool`` →
``"boolean"``. Any other annotation, a missing one, ``*args``/``**kwargs``, a keyword-less
(positional-only) parameter or a duplicate command name raises ``TypeError``/``ValueError`` at
import, naming the function and the parameter.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import threading
from typing import Any, Callable, Dict, List, Optional

__all__ = [
    "ARG_TYPES",
    "CommandArg",
    "CommandRegistry",
    "RegisteredCommand",
    "default_registry",
    "args_from_signature",
]

# Python annotation -> wire type, the only four V1 types.
ARG_TYPES: Dict[type, str] = {str: "string", int: "integer", float: "float", bool: "boolean"}
_WIRE_TYPES = frozenset(ARG_TYPES.values())
# `from __future__ import annotations` turns annotations into strings; these are read by name,
# never evaluated.
_ANNOTATION_NAMES = {"str": str, "int": int, "float": float, "bool": bool,
                     "builtins.str": str, "builtins.int": int, "builtins.float": float,
                     "builtins.bool": bool}

# The C++ registry's name rules (abx/registry/registry.h), checked here so that a bad name fails
# at import with the function's name rather than when abx-server registers it.
_COMMAND_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclasses.dataclass
class CommandArg:
    """One argument of a command. ``default`` is None when there is none."""

    name: str
    type: str = "string"  # one of "string", "integer", "float", "boolean"
    required: bool = False
    default: Any = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.type not in _WIRE_TYPES:
            raise ValueError(
                f"argument '{self.name}': unknown type {self.type!r} "
                f"(use one of {', '.join(sorted(_WIRE_TYPES))})"
            )
        if not isinstance(self.name, str) or not _ARG_NAME.fullmatch(self.name):
            raise ValueError(f"invalid argument name {self.name!r}: use [A-Za-z_][A-Za-z0-9_]{{0,63}}")
        if self.required and self.default is not None:
            raise ValueError(f"argument '{self.name}': a required argument cannot have a default")
        if self.default is not None:
            self.default = _check_default(self.type, self.default, f"argument '{self.name}'")

    def to_json(self) -> Dict[str, Any]:
        """The wire schema of GET /commands: name, type, required, default, description."""
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default": self.default,
            "description": self.description,
        }


@dataclasses.dataclass
class RegisteredCommand:
    """A command: its name, the function itself, its arguments and description."""

    name: str
    fn: Any  # a direct reference to the callable, never a source string
    args: List[CommandArg] = dataclasses.field(default_factory=list)
    description: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "args": [a.to_json() for a in self.args],
        }


def _check_default(wire_type: str, value: Any, what: str) -> Any:
    """The default as its wire type; bool is not an int here, an int is a float."""
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }[wire_type]
    if not ok:
        raise TypeError(f"{what}: default {value!r} is not of type {wire_type}")
    if wire_type == "float":
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{what}: default {value!r} cannot be sent as JSON")
    return value


def _annotation_type(annotation: Any) -> Optional[type]:
    if isinstance(annotation, str):
        return _ANNOTATION_NAMES.get(annotation.strip())
    if annotation in ARG_TYPES:
        return annotation
    return None


def args_from_signature(fn: Callable[..., Any]) -> List[CommandArg]:
    """The argument schema of ``fn`` from ``inspect.signature``.

    Raises TypeError naming the function and the parameter for anything outside V1: *args,
    **kwargs, positional-only parameters, a missing annotation or one other than str, int, float
    or bool, a default of another type.
    """
    qual = getattr(fn, "__qualname__", repr(fn))
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise TypeError(f"command '{qual}': cannot read its signature: {e}") from None
    out: List[CommandArg] = []
    for p in sig.parameters.values():
        where = f"command '{qual}', parameter '{p.name}'"
        if p.kind is p.VAR_POSITIONAL:
            raise TypeError(f"{where}: *{p.name} is not supported (commands take named arguments)")
        if p.kind is p.VAR_KEYWORD:
            raise TypeError(f"{where}: **{p.name} is not supported (declare each argument)")
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameters are not supported")
        if p.annotation is p.empty:
            raise TypeError(f"{where}: no type annotation (annotate it with str, int, float or bool)")
        t = _annotation_type(p.annotation)
        if t is None:
            shown = p.annotation if isinstance(p.annotation, str) else getattr(
                p.annotation, "__name__", repr(p.annotation))
            raise TypeError(
                f"{where}: unsupported type {shown} (V1 supports str, int, float and bool)"
            )
        wire = ARG_TYPES[t]
        if p.default is p.empty:
            out.append(CommandArg(p.name, wire, required=True))
            continue
        default = None if p.default is None else _check_default(wire, p.default, where)
        out.append(CommandArg(p.name, wire, required=False, default=default))
    return out


def _description_of(fn: Callable[..., Any]) -> str:
    return inspect.getdoc(fn) or ""


class CommandRegistry:
    """Commands by name. Thread-safe; frozen once the server starts."""

    def __init__(self) -> None:
        self._commands: Dict[str, RegisteredCommand] = {}
        self._frozen = False
        self._lock = threading.Lock()

    def register(
        self,
        name: str,
        fn: Any,
        *,
        args: Optional[List[CommandArg]] = None,
        description: str = "",
    ) -> RegisteredCommand:
        """Adds a command. ``args`` None reads them from ``fn``'s signature.

        Raises RuntimeError when frozen, ValueError for a malformed or taken name, TypeError for
        a non-callable or an unsupported signature.
        """
        if not callable(fn):
            raise TypeError(f"command '{name}': {fn!r} is not callable")
        if not isinstance(name, str) or not _COMMAND_NAME.fullmatch(name):
            raise ValueError(f"invalid command name {name!r}: use [A-Za-z_][A-Za-z0-9_-]{{0,63}}")
        if args is None:
            args = args_from_signature(fn)
        seen = set()
        for a in args:
            if not isinstance(a, CommandArg):
                raise TypeError(f"command '{name}': args must be CommandArg, got {a!r}")
            if a.name in seen:
                raise ValueError(f"command '{name}': argument '{a.name}' declared twice")
            seen.add(a.name)
        cmd = RegisteredCommand(name=name, fn=fn, args=list(args), description=description)
        with self._lock:
            if self._frozen:
                raise RuntimeError(
                    f"cannot register '{name}': the registry is frozen (the server has started)"
                )
            if name in self._commands:
                prev = self._commands[name].fn
                raise ValueError(
                    f"command '{name}' is registered twice "
                    f"({_where(prev)} and {_where(fn)})"
                )
            self._commands[name] = cmd
        return cmd

    def command(self, name: Optional[str] = None, **kwargs: Any) -> Callable[[Any], Any]:
        """Decorator: ``@registry.command()`` or ``@registry.command("other-name")``.

        The name defaults to the function's, the args to its signature, the description to its
        docstring. Returns the function unchanged.
        """
        if callable(name):  # used bare: @registry.command
            fn, name = name, None
            self.register(fn.__name__, fn, description=_description_of(fn))
            return fn

        def deco(fn: Any) -> Any:
            self.register(
                name or fn.__name__,
                fn,
                args=kwargs.get("args"),
                description=kwargs.get("description", _description_of(fn)),
            )
            return fn

        return deco

    def freeze(self) -> None:
        with self._lock:
            self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    def get(self, name: str) -> Optional[RegisteredCommand]:
        return self._commands.get(name)

    def list_all(self) -> Dict[str, RegisteredCommand]:
        """Every command by name, ordered by name (a copy)."""
        with self._lock:
            return {k: self._commands[k] for k in sorted(self._commands)}

    def __len__(self) -> int:
        return len(self._commands)

    def __contains__(self, name: object) -> bool:
        return name in self._commands


def _where(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    qual = getattr(fn, "__qualname__", repr(fn))
    if code is None:
        return qual
    return f"{qual} at {code.co_filename}:{code.co_firstlineno}"


_default_registry = CommandRegistry()


def default_registry() -> CommandRegistry:
    """The process-wide registry that ``abx.sandbox.register`` fills and the worker serves."""
    return _default_registry
