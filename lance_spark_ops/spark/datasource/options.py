"""Options of the ``lance`` data source, parsed from Spark's string options into typed values.

Spark hands every option over as a string in a case-insensitive map (keys lower-cased), so:

* storage options are given either one per key as ``storage.<key>`` (keys arrive lower-cased,
  which suits fsspec/object-store keys) or all at once as ``storage_options`` holding a JSON
  object (keeps the case of keys); both may be combined, ``storage.<key>`` wins;
* ``columns`` is a JSON list (``["a", "b"]``) or comma-separated names;
* booleans are ``true`` / ``false``; integers are decimal.

An option the source does not know is an error naming it (a misspelt option must not be
silently ignored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.options import plain_options
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS
from lance_spark_ops.table.write import DEFAULT_MAX_ROWS_PER_FILE

STORAGE_PREFIX = "storage."
DEFAULT_SPLIT_ROWS = 1 << 20  # a fragment larger than this is read by several tasks
# neighbouring whole fragments share a partition up to this many bytes of data files, each
# counted with ``PARTITION_OPEN_BYTES`` more (Spark's own file sources: maxPartitionBytes and
# openCostInBytes): a table of many small fragments is not one Spark task per fragment
DEFAULT_PARTITION_BYTES = 128 << 20
PARTITION_OPEN_BYTES = 4 << 20

_COMMON = {"path", "storage_options"}
READ_KEYS = _COMMON | {"version", "columns", "with_row_id", "with_row_address", "batch_rows",
                       "max_rows_per_partition", "max_bytes_per_partition", "split_fragments", "fragment_ids",
                       "version_timestamp"}
WRITE_KEYS = _COMMON | {"max_rows_per_file", "data_storage_version", "enable_stable_row_ids"}


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    low = str(raw).strip().lower()
    if low not in ("true", "false"):
        raise InvalidInputError(f"option {key!r} must be true or false, got {raw!r}")
    return low == "true"


def _int(opts: Mapping[str, str], key: str, default: int | None, positive: bool = True) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidInputError(f"option {key!r} must be an integer, got {raw!r}") from None
    if positive and value <= 0:
        raise InvalidInputError(f"option {key!r} must be positive, got {value}")
    return value


def _json(opts: Mapping[str, str], key: str) -> Any:
    try:
        return json.loads(opts[key])
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"option {key!r} is not valid JSON: {e}") from None


def _check_keys(opts: Mapping[str, str], allowed: set[str]) -> None:
    unknown = sorted(k for k in opts if k.lower() not in allowed and not k.lower().startswith(STORAGE_PREFIX))
    if unknown:
        raise InvalidInputError(f"unknown option(s) {unknown} for the lance data source "
                                f"(known: {sorted(allowed)} and storage.<key>)")


def storage_options(opts: Mapping[str, str]) -> dict[str, Any]:
    """``storage_options`` (JSON object) merged with ``storage.<key>`` options."""
    out: dict[str, Any] = {}
    if opts.get("storage_options") is not None:
        parsed = _json(opts, "storage_options")
        if not isinstance(parsed, dict):
            raise InvalidInputError(f"option 'storage_options' must be a JSON object, got {parsed!r}")
        out.update(parsed)
    for k, v in opts.items():
        if k.lower().startswith(STORAGE_PREFIX) and len(k) > len(STORAGE_PREFIX):
            out[k[len(STORAGE_PREFIX):]] = v
    return out


def _uri(opts: Mapping[str, str]) -> str:
    uri = opts.get("path")
    if not uri:
        raise InvalidInputError("the lance data source needs a dataset URI: .load(uri) / .save(uri)")
    return str(uri)


def _columns(opts: Mapping[str, str]) -> tuple[str, ...] | None:
    raw = opts.get("columns")
    if raw is None:
        return None
    if raw.strip().startswith("["):
        cols = _json(opts, "columns")
        if not all(isinstance(c, str) for c in cols):
            raise InvalidInputError(f"option 'columns' must list column names, got {cols!r}")
        return tuple(cols)
    return tuple(c.strip() for c in raw.split(",") if c.strip())


@dataclass(frozen=True)
class ReadOptions:
    """What a read asks for (see the package docstring for the option names)."""

    uri: str
    version: int | None = None
    columns: tuple[str, ...] | None = None
    with_row_id: bool = False
    with_row_address: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_rows_per_partition: int | None = None
    split_fragments: bool = True
    fragment_ids: tuple[int, ...] | None = None
    version_timestamp: datetime | None = None
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    max_bytes_per_partition: int = DEFAULT_PARTITION_BYTES  # 0: a partition per fragment

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> ReadOptions:
        _check_keys(opts, READ_KEYS)
        ids = None
        if opts.get("fragment_ids") is not None:
            raw = _json(opts, "fragment_ids")
            if not isinstance(raw, list) or not all(isinstance(i, int) for i in raw):
                raise InvalidInputError(f"option 'fragment_ids' must be a JSON list of integers, got {raw!r}")
            ids = tuple(raw)
        ts = opts.get("version_timestamp")
        max_bytes = _int(opts, "max_bytes_per_partition", DEFAULT_PARTITION_BYTES, positive=False)
        if max_bytes is None or max_bytes < 0:
            raise InvalidInputError(f"option 'max_bytes_per_partition' must be 0 or more, got {max_bytes}")
        return cls(_uri(opts), _int(opts, "version", None, positive=False), _columns(opts),
                   _bool(opts, "with_row_id", False), _bool(opts, "with_row_address", False),
                   _int(opts, "batch_rows", DEFAULT_BATCH_ROWS) or DEFAULT_BATCH_ROWS,
                   _int(opts, "max_rows_per_partition", None), _bool(opts, "split_fragments", True), ids,
                   datetime.fromisoformat(ts) if ts else None, storage_options(opts), max_bytes)


@dataclass(frozen=True)
class WriteOptions:
    """What a write asks for."""

    uri: str
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    data_storage_version: str | None = None
    enable_stable_row_ids: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> WriteOptions:
        _check_keys(opts, WRITE_KEYS)
        return cls(_uri(opts), _int(opts, "max_rows_per_file", DEFAULT_MAX_ROWS_PER_FILE)
                   or DEFAULT_MAX_ROWS_PER_FILE, opts.get("data_storage_version"),
                   _bool(opts, "enable_stable_row_ids", False), storage_options(opts))


def read_option_strings(columns: Any = None, with_row_id: bool = False, with_row_address: bool = False,
                        version: int | None = None, storage_options: Mapping[str, Any] | None = None,
                        **extra: Any) -> dict[str, str]:
    """Python values -> the string options of a read (``read_lance`` uses it)."""
    out: dict[str, str] = {"with_row_id": str(bool(with_row_id)).lower(),
                           "with_row_address": str(bool(with_row_address)).lower()}
    if columns is not None:
        out["columns"] = json.dumps(list(columns))
    if version is not None:
        out["version"] = str(int(version))
    if storage_options:
        out["storage_options"] = json.dumps(plain_options(storage_options))  # a provider is no text
    for k, v in extra.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = str(v).lower()
        elif isinstance(v, (list, tuple)):
            out[k] = json.dumps([int(x) for x in v])
        elif isinstance(v, datetime):
            out[k] = v.isoformat()
        else:
            out[k] = str(v)
    return out
