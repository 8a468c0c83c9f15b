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

import sys
from _thread import allocate_lock

# Only built-in modules load at import: a Python command server pays for every module its worker
# imports before it can listen (issue 37: create -> first call). Not `re` (~12 ms with `enum`
# and `functools`: names are checked by hand), not `threading` (`_thread`'s lock is the same
# lock), not `inspect` (~10 ms with `ast`, `dis`), `dataclasses` or `typing`: plain functions are
# read from their code objects, anything else falls back to `inspect.signature`, imported then.
# The annotations below stay strings (PEP 563), never evaluated, so their names need no import.

__all__ = [
    "ARG_TYPES",
    "CommandArg",
    "CommandRegistry",
    "RegisteredCommand",
    "default_registry",
    "args_from_signature",
    "description_of",
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
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_ARG_NAME_CHARS = _NAME_START | frozenset("0123456789")
_COMMAND_NAME_CHARS = _ARG_NAME_CHARS | {"-"}


def _is_name(s: object, chars: frozenset) -> bool:
    """``s`` matches ``[A-Za-z_][chars]{0,63}`` (ASCII only, as the C++ registry's rule)."""
    return (isinstance(s, str) and 0 < len(s) <= 64 and s[0] in _NAME_START
            and all(c in chars for c in s))


class CommandArg:
    """One argument of a command. ``default`` is None when there is none."""

    __slots__ = ("name", "type", "required", "default", "description")

    def __init__(
        self,
        name: str,
        type: str = "string",  # one of "string", "integer", "float", "boolean"
        required: bool = False,
        default: Any = None,
        description: str = "",
    ) -> None:
        self.name = name
        self.type = type
        self.required = required
        self.default = default
        self.description = description
        self._check()

    def __repr__(self) -> str:
        return (f"CommandArg(name={self.name!r}, type={self.type!r}, required={self.required!r}, "
                f"default={self.default!r}, description={self.description!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # mutable, as a dataclass without frozen=True

    def _check(self) -> None:
        if self.type not in _WIRE_TYPES:
            raise ValueError(
                f"argument '{self.name}': unknown type {self.type!r} "
                f"(use one of {', '.join(sorted(_WIRE_TYPES))})"
            )
        if not _is_name(self.name, _ARG_NAME_CHARS):
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


class RegisteredCommand:
    """A command: its name, the function itself, its arguments and description."""

    __slots__ = ("name", "fn", "args", "description")

    def __init__(
        self,
        name: str,
        fn: Any,  # a direct reference to the callable, never a source string
        args: Optional[List[CommandArg]] = None,
        description: str = "",
    ) -> None:
        self.name = name
        self.fn = fn
        self.args = [] if args is None else args
        self.description = description

    def __repr__(self) -> str:
        return (f"RegisteredCommand(name={self.name!r}, fn={self.fn!r}, args={self.args!r}, "
                f"description={self.description!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None

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


# A parameter as inspect.Parameter describes it, enough for the checks below.
_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD, _VAR_POSITIONAL, _KEYWORD_ONLY, _VAR_KEYWORD = range(5)
_EMPTY = object()
_FUNCTION = type(lambda: None)
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def _parameters(fn: Any) -> List[tuple]:
    """(name, kind, annotation, default) of each parameter of ``fn``, in inspect.signature's
    order. A plain function is read from its code object; anything else (a partial, a wrapped or
    bound callable, a class) goes through ``inspect.signature``. Raises TypeError or ValueError
    as inspect does."""
    if (
        _FUNCTION is not type(fn)
        or hasattr(fn, "__wrapped__")
        or hasattr(fn, "__signature__")
        or not hasattr(fn, "__code__")
    ):
        import inspect  # noqa: PLC0415 — the uncommon callables only

        return [
            (
                p.name,
                int(p.kind),
                _EMPTY if p.annotation is p.empty else p.annotation,
                _EMPTY if p.default is p.empty else p.default,
            )
            for p in inspect.signature(fn).parameters.values()
        ]
    code = fn.__code__
    names = code.co_varnames
    n_pos, n_posonly, n_kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    annotations = fn.__annotations__ or {}
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = n_pos - len(defaults)
    out = []
    for i in range(n_pos):
        kind = _POSITIONAL_ONLY if i < n_posonly else _POSITIONAL_OR_KEYWORD
        default = defaults[i - first_default] if i >= first_default else _EMPTY
        out.append((names[i], kind, annotations.get(names[i], _EMPTY), default))
    at = n_pos + n_kwonly
    if code.co_flags & _CO_VARARGS:
        name = names[at]
        out.append((name, _VAR_POSITIONAL, annotations.get(name, _EMPTY), _EMPTY))
        at += 1
    for i in range(n_pos, n_pos + n_kwonly):
        out.append((names[i], _KEYWORD_ONLY, annotations.get(names[i], _EMPTY),
                    kwdefaults.get(names[i], _EMPTY)))
    if code.co_flags & _CO_VARKEYWORDS:
        name = names[at]
        out.append((name, _VAR_KEYWORD, annotations.get(name, _EMPTY), _EMPTY))
    return out


def args_from_signature(fn: Callable[..., Any]) -> List[CommandArg]:
    """The argument schema of ``fn``'s signature (as ``inspect.signature`` reads it).

    Raises TypeError naming the function and the parameter for anything outside V1: *args,
    **kwargs, positional-only parameters, a missing annotation or one other than str, int, float
    or bool, a default of another type.
    """
    qual = getattr(fn, "__qualname__", repr(fn))
    try:
        params = _parameters(fn)
    except (TypeError, ValueError) as e:
        raise TypeError(f"command '{qual}': cannot read its signature: {e}") from None
    out: List[CommandArg] = []
    for name, kind, annotation, default in params:
        where = f"command '{qual}', parameter '{name}'"
        if kind == _VAR_POSITIONAL:
            raise TypeError(f"{where}: *{name} is not supported (commands take named arguments)")
        if kind == _VAR_KEYWORD:
            raise TypeError(f"{where}: **{name} is not supported (declare each argument)")
        if kind == _POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameters are not supported")
        if annotation is _EMPTY:
            raise TypeError(f"{where}: no type annotation (annotate it with str, int, float or bool)")
        t = _annotation_type(annotation)
        if t is None:
            shown = annotation if isinstance(annotation, str) else getattr(
                annotation, "__name__", repr(annotation))
            raise TypeError(
                f"{where}: unsupported type {shown} (V1 supports str, int, float and bool)"
            )
        wire = ARG_TYPES[t]
        if default is _EMPTY:
            out.append(CommandArg(name, wire, required=True))
            continue
        default = None if default is None else _check_default(wire, default, where)
        out.append(CommandArg(name, wire, required=False, default=default))
    return out


def _cleandoc(doc: str) -> str:
    """``inspect.cleandoc``: tabs expanded, the first line's leading blanks and the other lines'
    common indentation removed, blank lines at both ends dropped."""
    lines = doc.expandtabs().split("\n")
    margin = sys.maxsize
    for line in lines[1:]:
        content = len(line.lstrip())
        if content:
            margin = min(margin, len(line) - content)
    lines[0] = lines[0].lstrip()
    if margin < sys.maxsize:
        lines[1:] = [line[margin:] for line in lines[1:]]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def description_of(fn: Callable[..., Any]) -> str:
    """``inspect.getdoc(fn) or ""``: a plain function's own docstring is cleaned here, and a
    module-level function without one has none; a method without one (inspect looks for an
    inherited one) or another callable goes through inspect."""
    if _FUNCTION is type(fn):
        doc = fn.__doc__
        if isinstance(doc, str):
            return _cleandoc(doc)
        if doc is None and "." not in fn.__qualname__:
            return ""  # a module's own function: no class to inherit a docstring from
    import inspect  # noqa: PLC0415

    return inspect.getdoc(fn) or ""


class CommandRegistry:
    """Commands by name. Thread-safe; frozen once the server starts."""

    def __init__(self) -> None:
        self._commands: Dict[str, RegisteredCommand] = {}
        self._frozen = False
        self._lock = allocate_lock()

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
        if not _is_name(name, _COMMAND_NAME_CHARS):
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
            self.register(fn.__name__, fn, description=description_of(fn))
            return fn

        def deco(fn: Any) -> Any:
            self.register(
                name or fn.__name__,
                fn,
                args=kwargs.get("args"),
                description=kwargs.get("description", description_of(fn)),
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
