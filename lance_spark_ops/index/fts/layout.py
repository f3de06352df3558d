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


def fts_metadata(meta: dict[Any, Any] | None) -> dict[str, str]:
    """A ``metadata.lance`` schema metadata as str -> str."""
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (meta or {}).items()}


def remappable_fts_layout(meta: dict[str, str]) -> bool:
    """A segment of the layout this library writes and rewrites (arrow token set, Lance 1.0's
    posting layout: no ``format_version`` key). pylance 14's own segments (FST token set,
    format 2; or format 1 with ``_impacts`` and ``deleted_fragments``) are not."""
    return meta.get("token_set_format") == TOKEN_SET_FORMAT and "format_version" not in meta


def retokenizable_fts(meta: dict[str, str], deleted_fragments: bytes) -> str:
    """Why a pylance-written segment cannot be rewritten in this library's layout from the rows
    its docs list ("" when it can): a layout or tokenizer this library does not know, or
    fragments pylance marked deleted inside it (``deleted_fragments``, a roaring bitmap)."""
    from pyroaring import BitMap

    from lance_spark_ops.errors import LanceError
    from lance_spark_ops.index.fts.tokenizer import check_params

    if meta.get("token_set_format") not in ("fst", "arrow") or \
            meta.get("format_version", "1") not in ("1", "2"):
        return (f"FTS layout token_set_format {meta.get('token_set_format')!r}, "
                f"format_version {meta.get('format_version')!r} unknown")
    try:
        check_params(params_from_metadata(meta, "metadata.lance"))
        if deleted_fragments and BitMap.deserialize(deleted_fragments):
            return "the segment marks fragments deleted (deleted_fragments)"
    except LanceError as e:
        return str(e)
    except (ValueError, TypeError) as e:
        return f"deleted_fragments does not parse: {e}"
    return ""


def params_from_metadata(meta: dict[Any, Any] | None, where: str) -> dict[str, Any]:
    """The ``params`` JSON of a ``metadata.lance`` schema metadata."""
    meta = fts_metadata(meta)
    if "params" not in meta:
        raise CorruptFileError(f"{where}: no 'params' in the schema metadata")
    try:
        out = json.loads(meta["params"])
    except ValueError as e:
        raise CorruptFileError(f"{where}: 'params' is not JSON: {e}") from None
    if not isinstance(out, dict):
        raise CorruptFileError(f"{where}: 'params' is not a JSON object")
    return out
