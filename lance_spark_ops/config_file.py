"""Config files (TOML, or JSON by extension) read into a plain mapping: the one reader behind the
command line's ``--config`` (``spark.runtime.config``) and fleet policy files (``fleet.policy``),
kept below both so neither reaches up into the other's layer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lance_spark_ops.errors import InvalidInputError


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level table of a TOML file (``.json``: a JSON object), keys with ``-`` as ``_``."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidInputError(f"cannot read the config file: {e.strerror}", path=source) from None
    try:
        if source.endswith(".json"):
            parsed = json.loads(data)
        else:
            parsed = _toml().loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise InvalidInputError(f"not valid {'JSON' if source.endswith('.json') else 'TOML'}: {e}",
                                path=source) from None
    if not isinstance(parsed, dict):
        raise InvalidInputError("the config file must hold a table of options", path=source)
    return {k.replace("-", "_"): v for k, v in parsed.items()}


def _toml() -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib
