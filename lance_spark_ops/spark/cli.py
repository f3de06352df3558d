"""Command-line plumbing shared by the jobs: option dataclass fields -> ``--dashed-flags``,
Spark session, and the final one-line JSON metrics."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from typing import Any


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


def add_dataclass_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--flag`` per field of ``cls`` (snake_case -> dashes), typed from the annotation."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        hint = hints[f.name]
        if typing.get_origin(hint) is tuple:
            parser.add_argument(flag, type=int, nargs="*", default=None)
            continue
        args = typing.get_args(hint)  # Optional[X] -> X
        base = next((a for a in args if a is not type(None)), hint) if args else hint
        if base is bool:
            parser.add_argument(flag, type=_parse_bool, default=None, metavar="BOOL")
        elif base in (int, float, str):
            parser.add_argument(flag, type=base, default=None)
        else:
            parser.add_argument(flag, default=None)


def options_from_args(args: argparse.Namespace, cls: type) -> Any:
    kwargs = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name) is not None}
    return cls(**kwargs)


def print_metrics(metrics: Any) -> None:
    """Print the metrics as one JSON line, last, for schedulers that parse job output."""
    data = dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else dict(metrics)
    sys.stdout.write(json.dumps(data, default=str, sort_keys=True) + "\n")
    sys.stdout.flush()


def parse_storage_options(pairs: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` -> dict (fsspec storage options given on the command line)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out
