"""FTS index directory layout: file names and ``metadata.lance``'s schema (no I/O).

``metadata.lance`` has no columns; its schema metadata holds ``partitions`` (JSON list of
partition ids, each naming ``part_<id>_{tokens,invert,docs}.lance``), ``params`` (the
tokenizer parameters as JSON, what pylance reads back) and ``token_set_format`` ("arrow":
tokens as a ``_token`` / ``_token_id`` table; pylance 14 itself writes "fst").
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError

METADATA_FILE = "metadata.lance"
TOKEN_SET_FORMAT = "arrow"


def token_file(part: int) -> str:
    return f"part_{part}_tokens.lance"


def invert_file(part: int) -> str:
    return f"part_{part}_invert.lance"


def doc_file(part: int) -> str:
    return f"part_{part}_docs.lance"


def metadata_schema(part_ids: list[int], params_json: str) -> pa.Schema:
    return pa.schema([], metadata={"partitions": json.dumps(list(part_ids)), "params": params_json,
                                   "token_set_format": TOKEN_SET_FORMAT})


def params_from_metadata(meta: dict[Any, Any] | None, where: str) -> dict[str, Any]:
    """The ``params`` JSON of a ``metadata.lance`` schema metadata."""
    meta = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (meta or {}).items()}
    if "params" not in meta:
        raise CorruptFileError(f"{where}: no 'params' in the schema metadata")
    try:
        out = json.loads(meta["params"])
    except ValueError as e:
        raise CorruptFileError(f"{where}: 'params' is not JSON: {e}") from None
    if not isinstance(out, dict):
        raise CorruptFileError(f"{where}: 'params' is not a JSON object")
    return out
