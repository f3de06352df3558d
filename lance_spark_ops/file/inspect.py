"""Describe how a data file is encoded: per column and page, the layout and the tree of
compressions. Used by the inspect job and by tests that check an encoding really occurred."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb20
from lance_spark_ops._pb import encodings_v2_1_pb2 as pb21
from lance_spark_ops.file.container import unpack_any
from lance_spark_ops.file.metadata import FileMetadata


@dataclass(frozen=True)
class PageInfo:
    column: int
    page: int
    rows: int
    layout: str  # e.g. "mini_block_layout", "full_zip_layout", "constant_layout", 2.0: "nullable"
    encodings: tuple[str, ...]  # every oneof choice in the encoding tree, depth first
    message: Message


_NAMED_FIELDS = frozenset({"dictionary", "compression"})


def _oneofs(msg: Message) -> list[str]:
    """Names of every set oneof member and sub-message in ``msg``, depth first."""
    out: list[str] = []
    for fd, value in msg.ListFields():
        # oneof members name the encoding; a set dictionary / buffer compression is named too
        if fd.containing_oneof is not None or fd.name in _NAMED_FIELDS:
            out.append(fd.name)
        if fd.message_type is not None:
            values = value if fd.is_repeated else [value]
            for v in values:
                if isinstance(v, Message):
                    out.extend(_oneofs(v))
    return out


def describe_pages(meta: FileMetadata) -> list[PageInfo]:
    out = []
    for c in range(meta.num_columns):
        for p, page in enumerate(meta.column(c).pages):
            type_name, payload = unpack_any(page.encoding, meta.path, f"column {c} page {p}")
            msg: Message = pb21.PageLayout() if type_name.endswith("PageLayout") else pb20.ArrayEncoding()
            msg.ParseFromString(payload)
            names = _oneofs(msg)
            out.append(PageInfo(c, p, int(page.length), names[0] if names else "", tuple(names), msg))
    return out


def summarize(meta: FileMetadata) -> str:
    from lance_spark_ops.file.legacy.container import LegacyFileMetadata

    if isinstance(meta, LegacyFileMetadata):
        return meta.describe()
    lines = [f"{meta.path}: Lance file version {meta.version}, {meta.num_rows} rows, "
             f"{meta.num_columns} columns, {meta.size} bytes"]
    for info in describe_pages(meta):
        lines.append(f"  column {info.column} page {info.page}: {info.rows} rows, "
                     f"{' > '.join(info.encodings)}")
    return "\n".join(lines)
