"""Each option is declared once: a field of a pydantic-settings class, carrying the type, the default, the bounds and
the doc. Everything else is derived from it, so they can never disagree (TEI's rule: a flag, its env twin and its
doc are one declaration):

* the CLI flag ``--field-name`` (typer; ``--x/--no-x`` for booleans, the choices of a ``Literal`` type), with the
  help text ``doc (env: SAMELANG_...; default: ...)``;
* the environment twin, ``<env_prefix><FIELD>`` of the class (or the field's alias, e.g. the shared ``SAMELANG_HOME``);
* the reproduce command in model cards (:func:`reproduce_command`), which :func:`parse_options` reads back.

Precedence is pydantic-settings' own: a flag (an init argument), then the environment variable, then the default;
so the generated flags default to ``None`` ("not given") and never read the environment themselves.
"""

from __future__ import annotations

import functools
import inspect
import shlex
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import AliasChoices, BeforeValidator, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode

S = TypeVar("S", bound=BaseSettings)


def _split_list(value: Any) -> Any:
    """A list option from the environment: ``a,b`` (or a JSON list, which pydantic reads)."""
    if isinstance(value, str) and not value.lstrip().startswith("["):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


# list options: repeat the flag on the command line, comma-separate them in the environment
PathList = Annotated[list[Path], NoDecode, BeforeValidator(_split_list)]
StrList = Annotated[list[str], NoDecode, BeforeValidator(_split_list)]
IntList = Annotated[list[int], NoDecode, BeforeValidator(_split_list)]


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(cls: type[BaseSettings], name: str) -> str:
    """The environment variable of field ``name`` (its alias if it has one, else prefix + name)."""
    alias = cls.model_fields[name].validation_alias
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[-1])
    return f"{cls.model_config.get('env_prefix', '')}{name}".upper()


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the type without ``Annotated``/``None``, whether ``None`` was allowed)."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            annotation = args[0] if len(args) == 1 else str
        else:
            return annotation, optional


def _default_text(field: FieldInfo) -> str | None:
    if field.default_factory is not None:
        return None
    if field.default in (None, "") or field.is_required():
        return None
    if isinstance(field.default, bool):
        return "on" if field.default else "off"
    if isinstance(field.default, list):
        return ",".join(map(str, field.default)) or None
    return str(field.default)


def option_help(cls: type[BaseSettings], name: str) -> str:
    field = cls.model_fields[name]
    default = _default_text(field)
    tail = f"env: {env_name(cls, name)}" + (f"; default: {default}" if default is not None else "")
    # parentheses, not brackets: typer's rich help would read [..] as markup and drop it
    return f"{field.description or ''} ({tail})".strip()


def _parameter(cls: type[BaseSettings], name: str, field: FieldInfo) -> inspect.Parameter:
    """One typer option for one field; default ``None`` = "not given on the command line"."""
    typ, _ = _unwrap(field.annotation)
    flag = flag_name(name)
    help_text = option_help(cls, name)
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    decls = [flag, *extra.get("cli_aliases", ())]
    if extra.get("cli_argument"):
        option = typer.Argument(None, help=help_text, show_default=False)
    elif typ is bool:
        option = typer.Option(None, f"{flag}/--no-{flag[2:]}", help=help_text, show_default=False)
    else:
        option = typer.Option(None, *decls, help=help_text, show_default=False)
    if typing.get_origin(typ) is list:
        typ = list[typing.get_args(typ)[0]]
        option.metavar = "VALUE (repeatable)"
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=typ | None)


def build(cls: type[S], given: dict[str, Any]) -> S:
    """The options from the flags that were ``given`` (not None), the environment and the
    defaults; a validation error becomes a usage error that names the flag and its variable."""
    try:
        return cls(**{k: v for k, v in given.items() if v is not None and v != []})
    except ValidationError as e:
        first = e.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        aliases = {env_name(cls, n): n for n in cls.model_fields}
        name = aliases.get(name, name)
        message = first["msg"].removeprefix("Value error, ")
        if name in cls.model_fields:
            message = f"{flag_name(name)} / {env_name(cls, name)}: {message}"
        raise typer.BadParameter(message) from None


def command(cls: type[S], *, skip: Iterable[str] = ()) -> Callable[[Callable[[S], Any]], Callable[..., Any]]:
    """Decorator: turns ``fn(options: cls)`` into a typer command with one flag per field.

    The wrapped function keeps its docstring (the command's help); typer reads the
    generated ``__signature__``/``__annotations__``."""
    skipped = set(skip)

    def wrap(fn: Callable[[S], Any]) -> Callable[..., Any]:
        params = [_parameter(cls, n, f) for n, f in cls.model_fields.items() if n not in skipped]

        @functools.wraps(fn)
        def run(**given: Any) -> Any:
            return fn(build(cls, given))

        del run.__wrapped__  # typer must see the generated signature, not fn's
        run.__signature__ = inspect.Signature(params)
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return wrap


def parse_options(cls: type[S], argv: list[str]) -> S:
    """Read a command line's flags (as :func:`reproduce_command` writes them) into ``cls``."""
    captured: list[S] = []
    app = typer.Typer(add_completion=False)
    app.command()(command(cls)(captured.append))
    typer.main.get_command(app).main(list(argv), standalone_mode=False)
    return captured[0]


def _flag_value(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def reproduce_command(prog: str, options: BaseSettings, *, skip: Iterable[str] = (), first: Iterable[str] = ()) -> str:
    """``prog`` and every option's value (the ``first`` ones in front; ``skip`` and unset ones
    left out): the exact command, shell-quoted, that :func:`parse_options` reads back to
    ``options``. Defaults are written out too, so that the command means the same run after a
    default changes."""
    parts = shlex.split(prog)
    skipped, lead = set(skip), list(first)
    fields = type(options).model_fields
    for name in lead + [n for n in fields if n not in lead]:
        value = getattr(options, name)
        if name in skipped or value is None:
            continue
        if isinstance(value, bool):
            parts.append(flag_name(name) if value else f"--no-{flag_name(name)[2:]}")
            continue
        for item in _flag_value(value):
            parts += [flag_name(name), item]
    return shlex.join(parts)


def documented(cls: type[BaseSettings]) -> list[tuple[str, str, str]]:
    """(flag, env variable, help) of every option: what ``--help`` prints for each flag comes from here."""
    return [(flag_name(n), env_name(cls, n), option_help(cls, n)) for n in cls.model_fields]


def usage_errors(fn):
    """Errors of the user's making (a folder that holds the wrong thing, no model to evaluate)
    become usage errors, not tracebacks."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError) as e:
            raise typer.BadParameter(str(e)) from e

    return run
