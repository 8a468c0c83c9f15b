"""Layer 1 of discovery: local templates (``$ABX_HOME/templates/**/template.yaml``) and their
custom commands, rendered into shell commands with every value quoted (``shlex.quote``)."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import AbxError, CommandNotFound, InvalidArguments

ARG_TYPES = ("string", "integer", "float", "boolean")
CAPABILITIES = ("shell", "files", "code", "ports")
DEFAULT_CAPABILITIES = frozenset({"shell", "files", "code"})
MAX_TEMPLATE_BYTES = 256 * 1024
MAX_RENDERED_BYTES = 128 * 1024 - 1
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass
class ArgSpec:
    name: str
    type: str = "string"
    required: bool = False
    default: Any = None
    description: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "type": self.type, "required": self.required,
                "default": self.default, "description": self.description}


@dataclass
class CommandEntry:
    """One discovered command. ``source``: ``yaml`` (a template's custom command; runs as a
    shell command through ``Sandbox.run``), ``registered`` (a Python command module read
    locally) or ``remote`` (the running command server's ``GET /commands``)."""

    name: str
    description: str = ""
    source: str = "remote"
    args: List[ArgSpec] = field(default_factory=list)
    command: str = ""  # the shell template, for yaml entries

    def to_dict(self) -> Dict[str, Any]:
        d = {"name": self.name, "description": self.description, "source": self.source,
             "args": [a.to_dict() for a in self.args]}
        if self.source == "yaml" and self.command:
            d["command"] = self.command
        return d


def entry_from_json(v: Any, source: str) -> CommandEntry:
    """One entry of ``GET /commands`` (or of a template's ``customCommands``)."""
    if not isinstance(v, dict) or not isinstance(v.get("name"), str):
        raise AbxError(f"command entry without a name: {v!r}", type="Internal")
    e = CommandEntry(name=v["name"], description=v.get("description") or "", source=source,
                     command=v.get("command") or "")
    args = v.get("args") or []
    if not isinstance(args, list):
        raise AbxError(f"command {e.name}: args is not an array", type="Internal")
    for a in args:
        if not isinstance(a, dict) or not isinstance(a.get("name"), str):
            raise AbxError(f"command {e.name}: argument without a name", type="Internal")
        t = a.get("type", "string")
        if t not in ARG_TYPES:
            raise AbxError(f"command {e.name}: argument {a['name']} has unknown type {t!r}",
                           type="Internal")
        e.args.append(ArgSpec(a["name"], t, bool(a.get("required", False)), a.get("default"),
                              a.get("description") or ""))
    return e


@dataclass
class LocalTemplate:
    id: str
    capabilities: frozenset
    custom_commands: Dict[str, CommandEntry]
    source: Path


_LOADER = None


def _yaml():
    """PyYAML with a loader that reads booleans as YAML 1.2 (and yaml-cpp's schema reader) do:
    only true/false, so an argument named ``on``, ``yes`` or ``n`` stays a string."""
    global _LOADER
    try:
        import yaml  # Debian: python3-yaml
    except ImportError:
        raise AbxError("reading local templates needs PyYAML (Debian: apt install python3-yaml)",
                       type="Unavailable") from None
    if _LOADER is None:
        class Loader(yaml.SafeLoader):
            pass

        Loader.yaml_implicit_resolvers = {
            k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
            for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
        Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                     re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                     list("tTfF"))
        _LOADER = Loader
    return yaml


def _parse_template(path: Path) -> LocalTemplate:
    data = path.read_bytes()
    if len(data) > MAX_TEMPLATE_BYTES:
        raise AbxError(f"{path}: larger than {MAX_TEMPLATE_BYTES} bytes", type="PayloadTooLarge")
    y = _yaml()
    try:
        doc = y.load(data, Loader=_LOADER)
    except y.YAMLError as e:
        raise InvalidArguments(f"{path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise InvalidArguments(f"{path}: a template needs an 'id'")
    caps = doc.get("capabilities")
    if caps is None:
        capabilities = DEFAULT_CAPABILITIES
    else:
        if not isinstance(caps, list) or any(c not in CAPABILITIES for c in caps):
            raise InvalidArguments(f"{path}: capabilities must be a list of "
                                   f"{', '.join(CAPABILITIES)}")
        capabilities = frozenset(caps)
    commands: Dict[str, CommandEntry] = {}
    cc = doc.get("custom_commands") or {}
    if not isinstance(cc, dict):
        raise InvalidArguments(f"{path}: custom_commands must be a mapping")
    for name, spec in cc.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            raise InvalidArguments(f"{path}: custom command {name!r} needs a 'command'")
        args = []
        for a in spec.get("args") or []:
            if not isinstance(a, dict) or not _NAME.fullmatch(str(a.get("name", ""))):
                raise InvalidArguments(f"{path}: custom command {name!r}: bad arg {a!r}")
            if a.get("type") not in ARG_TYPES:
                raise InvalidArguments(f"{path}: custom command {name!r}: arg {a['name']!r} "
                                       f"needs a type ({', '.join(ARG_TYPES)})")
            args.append(ArgSpec(a["name"], a["type"], bool(a.get("required", False)),
                                a.get("default"), a.get("description") or ""))
        e = CommandEntry(str(name), spec.get("description") or "", "yaml", args, spec["command"])
        validate_custom_command(e, where=f"{path}: ")
        commands[e.name] = e
    return LocalTemplate(doc["id"], capabilities, dict(sorted(commands.items())), path)


def find_local_template(home: Path, template_id: str) -> Optional[LocalTemplate]:
    """The template ``template_id`` among ``home/templates/**/template.yaml`` (path order, the
    first file declaring the id wins, as in libabx), or None. A file that does not parse is
    skipped unless it is the one asked for (its folder is named after the id), which raises."""
    root = Path(home) / "templates"
    if not template_id or not root.is_dir():
        return None
    for f in sorted(root.rglob("template.yaml")):
        try:
            t = _parse_template(f)
        except AbxError:
            if f.parent.name == template_id:
                raise
            continue
        if t.id == template_id:
            return t
    return None


# --- custom commands ---------------------------------------------------------------------------

def _pieces(command: str):
    """Splits a command template into (is_placeholder, text); ``{{``/``}}`` are literal braces."""
    out = []
    i, lit = 0, []
    while i < len(command):
        c = command[i]
        if command.startswith("{{", i) or command.startswith("}}", i):
            lit.append(c)
            i += 2
        elif c == "{":
            j = command.find("}", i)
            if j < 0:
                raise InvalidArguments(f"unterminated placeholder in {command!r}")
            out.append((False, "".join(lit)))
            lit = []
            out.append((True, command[i + 1:j]))
            i = j + 1
        elif c == "}":
            raise InvalidArguments(f"unmatched '}}' in {command!r}")
        else:
            lit.append(c)
            i += 1
    out.append((False, "".join(lit)))
    return out


def validate_custom_command(cmd: CommandEntry, where: str = "") -> None:
    """Every placeholder is a declared argument and sits in plain shell context: not inside
    quotes, a comment or after a backslash or ``$`` (so a quoted value can never be
    re-interpreted). libabx's loader checks more contexts (here-documents, arithmetic)."""
    names = [a.name for a in cmd.args]
    if len(set(names)) != len(names):
        raise InvalidArguments(f"{where}custom command {cmd.name!r}: an arg is declared twice")
    quote: Optional[str] = None
    comment = False
    prev = ""
    for is_ph, text in _pieces(cmd.command):
        if is_ph:
            if text not in names:
                raise InvalidArguments(f"{where}custom command {cmd.name!r}: placeholder "
                                       f"{{{text}}} is not a declared arg")
            if quote or comment or prev in ("\\", "$"):
                raise InvalidArguments(f"{where}custom command {cmd.name!r}: placeholder "
                                       f"{{{text}}} must not be inside quotes, a comment, or "
                                       f"follow '\\' or '$'")
            prev = "x"
            continue
        i = 0
        while i < len(text):
            c = text[i]
            if comment:
                if c == "\n":
                    comment = False
            elif quote == "'":
                if c == "'":
                    quote = None
            elif quote == '"':
                if c == "\\":
                    i += 1
                elif c == '"':
                    quote = None
            elif c == "\\":
                i += 1
                if i >= len(text):
                    prev = "\\"
                    break
            elif c in "'\"":
                quote = c
            elif c == "#" and (i == 0 and prev in ("", " ", "\t", "\n") or
                               i > 0 and text[i - 1] in " \t\n;"):
                comment = True
            prev = c
            i += 1
    # A template left inside quotes would swallow the values after it.
    if quote:
        raise InvalidArguments(f"{where}custom command {cmd.name!r}: unterminated quote")


def coerce_args(cmd: CommandEntry, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The registry's strict table (abx/registry/coerce.h): integer takes ints only (no bools,
    no 1.0), float takes ints and finite floats, boolean only True/False, string only str.
    Unknown and missing required arguments are errors naming them; defaults fill the rest."""
    known = {a.name for a in cmd.args}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise InvalidArguments("unknown argument" + ("s " if len(unknown) > 1 else " ") +
                               ", ".join(f"'{k}'" for k in unknown) + f" for {cmd.name}")
    out: Dict[str, Any] = {}
    for a in cmd.args:
        if a.name not in kwargs:
            if a.required:
                raise InvalidArguments(f"missing required argument '{a.name}' for {cmd.name}")
            if a.default is not None:
                out[a.name] = a.default
            continue
        v = kwargs[a.name]
        ok = {
            "string": isinstance(v, str),
            "integer": isinstance(v, int) and not isinstance(v, bool) and
            _INT64[0] <= v <= _INT64[1],
            "float": isinstance(v, (int, float)) and not isinstance(v, bool) and
            math.isfinite(v),
            "boolean": isinstance(v, bool),
        }[a.type]
        if not ok:
            raise InvalidArguments(f"argument '{a.name}' must be {a.type}, got {v!r}")
        if a.type == "string" and "\0" in v:
            raise InvalidArguments(f"argument '{a.name}' contains a NUL byte, which no shell "
                                   f"argument can hold")
        out[a.name] = float(v) if a.type == "float" else v
    return out


def _render_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return shlex.quote(v)


def render_custom_command(cmd: CommandEntry, kwargs: Dict[str, Any]) -> str:
    """The shell command for ``/bin/bash -c``: each ``{name}`` replaced by its value, strings
    through ``shlex.quote``, numbers in shortest form, booleans as true/false, and an omitted
    optional argument as ``''``."""
    validate_custom_command(cmd)
    values = coerce_args(cmd, kwargs)
    out = []
    for is_ph, text in _pieces(cmd.command):
        out.append((_render_value(values[text]) if text in values else "''") if is_ph else text)
    s = "".join(out)
    if len(s.encode("utf-8")) > MAX_RENDERED_BYTES:
        raise AbxError(f"rendered command for {cmd.name!r} is longer than {MAX_RENDERED_BYTES} "
                       f"bytes", type="PayloadTooLarge")
    return s


def custom_commands_from_template_json(t: Dict[str, Any]) -> Dict[str, CommandEntry]:
    """A platform template's custom commands (``customCommands``, else the E2B-shaped
    ``metadata.custom_commands`` JSON string), checked like a local file's."""
    import json
    lst = t.get("customCommands")
    if lst is None:
        md = t.get("metadata")
        if isinstance(md, dict) and isinstance(md.get("custom_commands"), str):
            try:
                lst = json.loads(md["custom_commands"])
            except ValueError:
                lst = None
    out: Dict[str, CommandEntry] = {}
    if isinstance(lst, list):
        for v in lst:
            e = entry_from_json(v, "yaml")
            validate_custom_command(e)
            out[e.name] = e
    return out


def capabilities_from_template_json(t: Any) -> Optional[frozenset]:
    if not isinstance(t, dict):
        return None
    if isinstance(t.get("capabilities"), list):
        return frozenset(c for c in t["capabilities"] if c in CAPABILITIES)
    md = t.get("metadata")
    if isinstance(md, dict) and isinstance(md.get("capabilities"), str):
        return frozenset(c.strip() for c in md["capabilities"].split(",")
                         if c.strip() in CAPABILITIES)
    return None


def command_not_found(template_id: str, name: str) -> CommandNotFound:
    return CommandNotFound(f"template '{template_id}' has no custom command '{name}'", status=0,
                           type="NotFound", command=name)
