"""The ``google.protobuf.Any`` inside a file's ``Encoding`` message (``file2.proto``): column and
page encodings of 2.0 files name their message type there. Lives with the encodings so the
2.0 decoders read it without importing the file layer (``file.container`` re-exports it).
"""

from __future__ import annotations

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from lance_spark_ops._pb import file2_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def unpack_any(encoding: file2_pb2.Encoding, path: str, where: str) -> tuple[str, bytes]:
    """The (type name, payload) of a direct ``google.protobuf.Any`` encoding."""
    kind = encoding.WhichOneof("location")
    if kind is None or kind == "none":
        return "", b""
    if kind != "direct":
        raise UnsupportedError(f"{where}: {kind} (deferred) encodings are not supported", path=path)
    anyv = any_pb2.Any()
    try:
        anyv.ParseFromString(encoding.direct.encoding)
    except DecodeError as e:
        raise CorruptFileError(f"{where}: encoding does not parse ({e})", path=path) from e
    return anyv.type_url.rsplit("/", 1)[-1], anyv.value
