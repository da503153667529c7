"""Command-line options generated from a pydantic model, so that a parameter is typed once: in its model.

:func:`add_model_options` adds one argparse option per field: the flag is the field's name with dashes
(``exec_timeout_s`` -> ``--exec-timeout-s``, unless :class:`Option` names another), the help is the field's
``description`` (with the model's default appended), and the value's type, bounds and choices come from the
annotation: ``int``/``float`` with ``Field(ge=, gt=, le=, lt=)``, ``Literal[...]`` as choices, ``bool`` with a
``False`` default as a switch, ``list[X]`` as comma-separated ``X``; anything else needs :attr:`Option.parse`.

Every option defaults to "not given", so the model's own default applies (a default lives in one place) and the
returned :class:`ModelOptions` builds the model from the parsed flags. A value argparse refuses exits 2 with
argparse's line naming the flag; a value the model refuses is an :class:`~offload_lab.core.errors.InputError`
(exit 2, one line) naming the flag as the user typed it, old spelling included.

argparse rather than cyclopts or typer: the whole command line is argparse today; a second parser library would be
a new dependency and would change ``--json``, the exit codes and the error lines that scripts and tests rely on.
The idea follows GuideLLM's click bridge (``registry_options_from_model``) and AIPerf's annotated fields.

:func:`deprecated_alias` is the other half of "one name per concept": an old spelling keeps working, hidden from
``--help``, and prints one deprecation line to stderr when used.
"""

from __future__ import annotations

import argparse
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from offload_lab.core.outcome import Outcome

# Where each action records the spelling the user typed, so that a later error names it.
_TYPED = "_typed_flags"
_NOT_GIVEN = None


@dataclass(frozen=True)
class Option:
    """How one field appears on the command line when its flag, parser or help is not derived from the field."""

    flag: str | None = None  # default: --field-name
    aliases: tuple[str, ...] = ()  # old spellings: accepted, hidden, with a deprecation line
    parse: Callable[[str], Any] | None = None  # text -> value, for annotations the bridge does not read (dicts)
    help: str | None = None  # default: the field's description
    metavar: str | None = None
    required: bool = False  # checked after parsing, so that an alias can satisfy it
    positional: bool = False  # the command's object (a file, a folder): `offload-lab CMD VALUE`, no flag
    repeat: bool = False  # a list flag that may be given again, each time adding to the list


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


class _Store(argparse.Action):
    """``store`` (or ``store_const`` with ``nargs=0``) that also records the spelling typed; an alias prints its
    deprecation line."""

    def __init__(self, option_strings: list[str], dest: str, replaced_by: str | None = None, repeat: bool = False,
                 **kw: Any) -> None:
        self.replaced_by, self.repeat = replaced_by, repeat
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if self.replaced_by and option_string:
            print(f"offload-lab: warning: {option_string} is deprecated, use {self.replaced_by} (the old spelling "
                  "goes in a later release)", file=sys.stderr)
        if self.repeat and getattr(namespace, self.dest, None):
            values = [*getattr(namespace, self.dest), *values]
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        typed = dict(getattr(namespace, _TYPED, None) or {})
        typed[self.dest] = option_string
        setattr(namespace, _TYPED, typed)


def deprecated_alias(parser: argparse.ArgumentParser, old: str, new: argparse.Action) -> argparse.Action:
    """Accept ``old`` as a hidden spelling of the option ``new`` (same destination, type and choices)."""
    return parser.add_argument(old, dest=new.dest, action=_Store, replaced_by=new.option_strings[0],
                               repeat=getattr(new, "repeat", False), nargs=new.nargs, const=new.const, type=new.type,
                               choices=new.choices,
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def typed_flag(args: argparse.Namespace, dest: str, default: str) -> str:
    """The spelling the user typed for ``dest`` (an alias included), else ``default``."""
    return (getattr(args, _TYPED, None) or {}).get(dest) or default


# --- value parsers from annotations ------------------------------------------------------------------------------

def _bounds(info: FieldInfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(m, name, None) is not None:
                out[name] = getattr(m, name)
    return out


def _number(kind: type, b: dict[str, Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        if kind is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        bad = (("ge" in b and v < b["ge"]) or ("gt" in b and v <= b["gt"]) or ("le" in b and v > b["le"])
               or ("lt" in b and v >= b["lt"]))
        if bad:
            words = [f"{say} {_num(b[key])}" for key, say in (("ge", "at least"), ("gt", "more than"),
                                                              ("le", "at most"), ("lt", "less than")) if key in b]
            raise argparse.ArgumentTypeError(f"{_num(v)} is out of range: give {' and '.join(words)}")
        return v

    parse.__name__ = "whole number" if kind is int else "number"  # argparse's "invalid <name> value"
    return parse


def _num(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` to ``(X, True)``; ``Annotated[X, ...]`` to X."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return _unwrap(rest[0])[0], True
    return annotation, False


def _element(annotation: Any, info: FieldInfo) -> tuple[Callable[[str], Any] | None, tuple[Any, ...] | None]:
    """A parser and choices for one value of ``annotation`` (None, None: not something a flag can say)."""
    if typing.get_origin(annotation) is Literal:
        return None, typing.get_args(annotation)
    if annotation is int or annotation is float:
        return _number(annotation, _bounds(info)), None
    if annotation is str:
        return str, None
    if annotation is Path:
        return Path, None
    return None, None


def _comma_list(parse: Callable[[str], Any], choices: tuple[Any, ...] | None) -> Callable[[str], list[Any]]:
    def parse_list(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r} names nothing: give one or more values, comma-separated")
        if choices is not None:
            bad = [t for t in items if t not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"{', '.join(bad)} not among {', '.join(map(str, choices))}")
        return [parse(t) for t in items]

    parse_list.__name__ = "comma-separated list"
    return parse_list


def _refusing(parse: Callable[[str], Any], flag: str) -> Callable[[str], Any]:
    """A field's own parser, whose ValueError (InputError included) argparse reports against the flag (named
    once: argparse's line already starts with it)."""
    from offload_lab.core.errors import InputError

    def wrapped(text: str) -> Any:
        try:
            return parse(text)
        except (InputError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(f"{flag} ")) from None

    wrapped.__name__ = getattr(parse, "__name__", "value")
    return wrapped


def _default_words(value: Any) -> str | None:
    if value is None or isinstance(value, bool) or value == {} or value == []:
        return None
    if isinstance(value, list):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


# --- the bridge --------------------------------------------------------------------------------------------------

@dataclass
class ModelOptions:
    """The options one call of :func:`add_model_options` added: which flag sets which field, and how to build the
    model back from the parsed flags."""

    model: type[BaseModel]
    flags: dict[str, str]  # field -> flag (its visible spelling)
    required: tuple[str, ...] = ()

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        """The fields whose flags were given (the rest keep the model's defaults)."""
        return {f: getattr(args, f) for f in self.flags if getattr(args, f, _NOT_GIVEN) is not _NOT_GIVEN}

    def named(self, args: argparse.Namespace) -> dict[str, str]:
        """Field -> the flag as typed (an old spelling when the user typed one): what an error names."""
        return {f: typed_flag(args, f, flag) for f, flag in self.flags.items()}

    def build(self, args: argparse.Namespace, what: str, **extra: Any) -> Any:
        """The model from the flags given plus ``extra``; a refusal is an InputError naming the flags as typed."""
        from offload_lab.core.errors import InputError
        from offload_lab.core.inputs import pydantic_input_error

        values = self.given(args)
        missing = [self.flags[f] for f in self.required if f not in values and f not in extra]
        if missing:
            raise InputError(f"{what}: {', '.join(missing)} is required")
        try:
            return self.model(**(values | extra))
        except ValidationError as e:
            raise pydantic_input_error(e, what, self.named(args)) from e


def add_model_options(parser: argparse.ArgumentParser | Any, model: type[BaseModel], fields: Iterable[str],
                      options: dict[str, Option] | None = None) -> ModelOptions:
    """Add an option for each of ``fields`` of ``model`` to ``parser`` (or an argument group); see the module."""
    options = options or {}
    flags: dict[str, str] = {}
    required = []
    for name in fields:
        info = model.model_fields[name]
        opt = options.get(name, Option())
        flag = opt.flag or flag_name(name)
        help_ = opt.help or info.description
        if not help_:
            raise TypeError(f"{model.__name__}.{name} has no description: it is the flag's help")
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if opt.help is None and (words := _default_words(default)) is not None:
            help_ += f" (default: {words})"
        help_ = help_.replace("%", "%%")
        kw: dict[str, Any] = {"dest": name, "default": _NOT_GIVEN, "help": help_, "action": _Store}
        annotation, _ = _unwrap(info.annotation)
        if opt.parse is not None:
            kw["type"] = _refusing(opt.parse, flag)
        elif annotation is bool:
            # A switch sets the value other than the default (``--no-pin`` for a field that is True unless given).
            kw |= {"nargs": 0, "const": default is not True}
        else:
            origin = typing.get_origin(annotation)
            if origin is list:
                inner, _ = _unwrap(typing.get_args(annotation)[0])
                parse, choices = _element(inner, info)
                kw["type"] = _comma_list(parse or str, choices)
                kw["metavar"] = "A,B,..."
                kw["repeat"] = opt.repeat
            else:
                parse, choices = _element(annotation, info)
                if parse is None and choices is None:
                    raise TypeError(f"{model.__name__}.{name}: a {annotation} needs Option(parse=...)")
                kw["type"] = parse or type(choices[0])  # type: ignore[index]
                if choices is not None:
                    kw["choices"] = choices
        # The metavar from the flag, not the field: `--timeout SECONDS`-like words, never `TIMEOUT_S`.
        kw.setdefault("metavar", "N" if annotation is int else "SECONDS" if name.endswith("_s")
                      else flag.lstrip("-").replace("-", "_").upper())
        if opt.metavar:
            kw["metavar"] = opt.metavar
        if kw.get("nargs") == 0 or ("choices" in kw and not opt.metavar):  # a metavar given: the help names them
            kw.pop("metavar")
        if opt.positional:
            flag = opt.metavar or name.upper()
            kw = {k: v for k, v in kw.items() if k not in ("dest", "metavar")} | {"metavar": flag}
            if typing.get_origin(annotation) is list:
                kw["type"] = _element(_unwrap(typing.get_args(annotation)[0])[0], info)[0] or str
                kw["nargs"] = "+"
            elif not info.is_required():
                kw["nargs"] = "?"
            action = parser.add_argument(name, **kw)
        else:
            action = parser.add_argument(flag, **kw)
        for old in opt.aliases:
            deprecated_alias(parser, old, action)
        flags[name] = flag
        if (opt.required or info.is_required()) and not opt.positional:
            required.append(name)
    return ModelOptions(model, flags, tuple(required))


def deprecated_positional(parser: argparse.ArgumentParser, dest: str, flag: str) -> None:
    """Accept a positional value for ``dest`` as the old spelling of ``flag`` (``campaign ledger NAME`` for
    ``campaign ledger --campaign NAME``): hidden from ``--help``, one deprecation line when used."""

    class _Old(_Store):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            if values is None:  # argparse calls an absent optional positional with its default
                return
            print(f"offload-lab: warning: a positional {flag.lstrip('-').upper()} is deprecated, use {flag} "
                  "(the old spelling goes in a later release)", file=sys.stderr)
            setattr(namespace, dest, values)
            setattr(namespace, _TYPED, dict(getattr(namespace, _TYPED, None) or {}) | {dest: flag})

    parser.add_argument(f"_{dest}_positional", nargs="?", default=None, action=_Old, help=argparse.SUPPRESS)


# --- a command table ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One leaf command: its name, one-line help, the model its flags come from (and which fields, default all),
    and the handler, called as ``handler(params, args)`` with the model built from the flags (``args`` keeps
    ``--json``). ``description`` defaults to the help; details belong in the docs, so ``--help`` fits a screen."""

    name: str
    help: str
    handler: Callable[[Any, argparse.Namespace], int]
    model: type[BaseModel] | None = None
    fields: tuple[str, ...] | None = None
    options: dict[str, Option] = field(default_factory=dict)
    description: str | None = None
    json: str | None = "print JSON"  # the --json flag's help; None: no --json
    old_positional: str | None = None  # a field once given as a positional: kept as a hidden deprecated alias
    # more models the command fills, each (model, fields or None for all, options): the handler's first argument is
    # then the tuple of the models built, ``model``'s first
    also: tuple[tuple[type[BaseModel], tuple[str, ...] | None, dict[str, Option]], ...] = ()


def add_commands(sub: Any, commands: Iterable[Command]) -> dict[str, argparse.ArgumentParser]:
    """Register each command of the table on ``sub`` (an ``add_subparsers`` result); returns the parsers by name."""
    made = {}
    for c in commands:
        p = sub.add_parser(c.name, help=c.help, description=c.description or c.help[:1].upper() + c.help[1:] + ".")
        opts: tuple[ModelOptions, ...] = ()
        for model, fields, options in ((c.model, c.fields, c.options), *c.also) if c.model is not None else ():
            opts += (add_model_options(p, model, fields or tuple(model.model_fields), options),)
        if c.old_positional:
            deprecated_positional(p, c.old_positional, opts[0].flags[c.old_positional])
        if c.json is not None:
            p.add_argument("--json", action="store_true", help=c.json)
        # A usage line that lists every option repeats the list below it: name the positionals only.
        shown = [a.metavar or a.dest for a in p._actions if not a.option_strings and a.help != argparse.SUPPRESS]
        p.usage = " ".join(["%(prog)s [options]", *map(str, shown)])
        p.set_defaults(func=_Call(c, opts), model_options=opts)
        made[c.name] = p
    return made


@dataclass(frozen=True)
class _Call:
    command: Command
    options: tuple[ModelOptions, ...]

    def __call__(self, args: argparse.Namespace) -> int:
        top = getattr(args, "command", None)
        what = self.command.name if top in (None, self.command.name) else f"{top} {self.command.name}"
        built = tuple(o.build(args, what) for o in self.options)
        params = built if len(built) > 1 else built[0] if built else None
        result = self.command.handler(params, args)
        if isinstance(result, Outcome):  # the library's result: JSON with --json, else its lines
            from offload_lab.cli.common import show

            return show(args, result)
        return int(result or 0)
