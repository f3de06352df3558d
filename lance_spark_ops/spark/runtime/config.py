"""Job options as data: one ``OptionSpec`` per field of an options dataclass (type, default,
choices and the help text from the class docstring's ``Attributes:`` section), values typed
from strings or config-file values (files read by ``config_file``) and storage options from the
environment. Shared by the command line (``spark.runtime.cli``), notebooks and DAGs so every entry
point reads options the same way."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError

ENV_STORAGE_OPTIONS = "LSO_STORAGE_OPTIONS"  # a JSON object
ENV_STORAGE_OPTION_PREFIX = "LSO_STORAGE_OPTION_"  # one variable per key, e.g. ..._AWS_ACCESS_KEY_ID
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
REQUIRED = dataclasses.MISSING


@dataclass(frozen=True)
class OptionSpec:
    """One option of a job: ``name`` (snake_case; the flag is ``--name-with-dashes``), element
    type ``kind`` (bool, int, float or str), whether it takes a list, its default and choices."""

    name: str
    kind: type
    default: Any
    help: str = ""
    choices: tuple[Any, ...] | None = None
    multiple: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(f"expected a boolean ({'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}), got {text!r}")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: text}`` from the ``Attributes:`` section of ``cls.__doc__`` (Google style:
    ``name: text`` one indent in, continuation lines indented further)."""
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    docs: dict[str, list[str]] = {}
    start = next((i + 1 for i, line in enumerate(lines) if line.strip() == "Attributes:"), len(lines))
    entry_indent, current = None, None
    for line in lines[start:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section
        m = re.match(r"(\w+):\s*(.*)$", line.strip())
        if m and (entry_indent is None or indent == entry_indent):
            entry_indent, current = indent, m.group(1)
            docs[current] = [m.group(2)]
        elif current is not None:
            docs[current].append(line.strip())
    return {k: " ".join(v).strip() for k, v in docs.items()}


def _element(hint: Any) -> tuple[type, bool, tuple[Any, ...] | None]:
    """(element type, takes a list, Literal choices) of an annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or (args and type(None) in args):
        return _element(next(a for a in args if a is not type(None)))
    if origin in (tuple, list) or hint in (tuple, list):
        kind, _, choices = _element(args[0] if args else str)
        return kind, True, choices
    if origin is typing.Literal:
        return type(args[0]), False, tuple(args)
    if hint not in (bool, int, float, str):
        raise TypeError(f"option type {hint!r} is not supported (bool, int, float, str, tuples of them)")
    return hint, False, None


@functools.cache
def _specs(cls: type, choices: tuple[tuple[str, tuple[Any, ...]], ...]) -> tuple[OptionSpec, ...]:
    hints, docs, extra = typing.get_type_hints(cls), field_docs(cls), dict(choices)
    out = []
    for f in dataclasses.fields(cls):
        kind, multiple, literal = _element(hints[f.name])
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory() if f.default_factory is not dataclasses.MISSING else REQUIRED)
        out.append(OptionSpec(f.name, kind, default, docs.get(f.name, ""),
                              extra.get(f.name) or f.metadata.get("choices") or literal, multiple))
    return tuple(out)


def option_specs(cls: type, choices: Mapping[str, Sequence[Any]] | None = None) -> tuple[OptionSpec, ...]:
    """The options of dataclass ``cls``; ``choices`` adds allowed values to fields typed ``str``."""
    return _specs(cls, tuple(sorted((k, tuple(v)) for k, v in (choices or {}).items())))


def _scalar(spec: OptionSpec, value: Any) -> Any:
    kind = spec.kind
    if isinstance(value, str) and kind is not str:
        text = value.strip()
        try:
            value = parse_bool(text) if kind is bool else kind(text)
        except ValueError:
            raise ValueError(f"expected {kind.__name__}, got {value!r}") from None
    elif kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # e.g. `data_storage_version = 2.1` in TOML
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"expected {kind.__name__}, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"expected one of {', '.join(map(str, spec.choices))}, got {value!r}")
    return value


def coerce(spec: OptionSpec, value: Any, source: str | None = None) -> Any:
    """``value`` (a string from a widget or environment, or a TOML/JSON value) as the option's
    type; a list option takes a list, a ``{key: value}`` table (as ``key=value`` strings) or a
    string (comma-separated for numbers, one item a line for text)."""
    try:
        if not spec.multiple:
            return _scalar(spec, value)
        if isinstance(value, Mapping):
            value = [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, str):
            parts = value.splitlines() if spec.kind is str else re.split(r"[,\s]+", value)
            value = [p.strip() for p in parts if p.strip()]
        elif not isinstance(value, (list, tuple)):
            value = [value]
        return tuple(_scalar(spec, v) for v in value)
    except ValueError as e:
        raise InvalidInputError(f"option {spec.name}: {e}", path=source) from None


def typed_options(cls: type, values: Mapping[str, Any], *, choices: Mapping[str, Sequence[Any]] | None = None,
                  source: str | None = None) -> dict[str, Any]:
    """``values`` (names in snake_case or with dashes) typed for ``cls``; empty strings and
    ``None`` mean "not given" and are dropped. Unknown names are an ``InvalidInputError``."""
    specs = {s.name: s for s in option_specs(cls, choices)}
    out = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in specs:
            raise InvalidInputError(f"unknown option {key!r} (known: {', '.join(specs)})", path=source)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        out[name] = coerce(specs[name], value, source)
    return out


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Storage options from ``LSO_STORAGE_OPTIONS`` (a JSON object) and, over it, from each
    ``LSO_STORAGE_OPTION_<KEY>`` (``<KEY>`` lower-cased: ``..._AWS_REGION`` -> ``aws_region``)."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    if env.get(ENV_STORAGE_OPTIONS, "").strip():
        try:
            parsed = json.loads(env[ENV_STORAGE_OPTIONS])
        except ValueError:  # the message would quote the (secret) text
            raise InvalidInputError(f"{ENV_STORAGE_OPTIONS} is not a JSON object") from None
        if not isinstance(parsed, dict):
            raise InvalidInputError(f"{ENV_STORAGE_OPTIONS} is not a JSON object")
        out.update(parsed)
    for key, value in env.items():
        if key.startswith(ENV_STORAGE_OPTION_PREFIX) and len(key) > len(ENV_STORAGE_OPTION_PREFIX):
            out[key[len(ENV_STORAGE_OPTION_PREFIX):].lower()] = value
    return out


def parse_key_values(pairs: Iterable[str], what: str = "--storage-option") -> dict[str, str]:
    """``["key=value", ...]`` -> dict; the value may contain ``=``. The error never quotes the
    value (it may be a credential)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"{what} expects KEY=VALUE (got an item without '=' or key)")
        out[key.strip()] = value
    return out


def secret_values(storage_options: Mapping[str, Any], min_length: int = 6) -> tuple[str, ...]:
    """The storage option values to hide in anything printed (all of at least ``min_length``
    characters: keys, regions-as-secrets and short flags like ``true`` are left readable)."""
    values = {str(v) for v in storage_options.values() if v is not None and len(str(v)) >= min_length}
    return tuple(sorted(values, key=len, reverse=True))


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (also as escaped inside a JSON string) replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret:
            text = text.replace(escaped, "***")
    return text


def parse_param_values(pairs: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> dict of index parameters: a value that reads as JSON (numbers,
    ``true`` / ``false``, ``null``, lists, objects) is taken as such, any other as text
    (``metric=cosine``); a key given twice is an error."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidInputError(f"--param expects KEY=VALUE, got {pair!r}")
        if key in out:
            raise InvalidInputError(f"--param {key!r} given twice")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out
