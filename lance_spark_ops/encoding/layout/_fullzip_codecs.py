"""Private per-value fallbacks for the full-zip decoder: Flat, FixedSizeList and General.

These codecs belong to modules owned by another part of the project (``value.py``,
``fixed_size_list.py``, ``general.py``); ``fullzip.per_value`` uses the functions here only
while those modules do not yet expose ``decode_<name>_per_value``. Byte facts:

- Flat: values are already flat, ``bits_per_value`` each.
- FixedSizeList (nested ``items_per_value`` layers down to a Flat of ``bits_per_item``): each
  row is ``[validity bitmap of every layer with has_validity, outermost first, each
  ceil(cum_dim / 8) bytes, LSB first][cum_dim * bits_per_item / 8 data bytes]`` where
  ``cum_dim`` is the product of the dimensions down to that layer. E.g.
  ``fixed_size_list<float32, 128>`` with item nulls: 16 bitmap bytes + 512 data bytes = 4224
  bits per value.
- General (per value): each value is compressed on its own. zstd: ``u64 uncompressed length``
  + a zstd frame (older files: a bare frame, recognised by the frame magic with the reserved
  header bit clear). lz4: ``u32 uncompressed length`` + an lz4 block.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedSizeListBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def codec_available(kind: str, context: str) -> bool:
    from lance_spark_ops.encoding.compression.decompress import CODEC_MODULES

    name = CODEC_MODULES.get(kind)
    if name is None:
        return False
    try:
        module = importlib.import_module(f"lance_spark_ops.encoding.compression.{name}")
    except ModuleNotFoundError:
        return False
    return hasattr(module, f"decode_{kind}_{context}")


def flat_per_value(msg: pb.Flat, block: DataBlock) -> DataBlock:
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"flat: expected fixed-width values, got {type(block).__name__}")
    if msg.HasField("data"):
        raise UnsupportedError("flat: per-value buffer compression is not supported")
    if int(msg.bits_per_value) != block.bits_per_value:
        raise CorruptFileError(
            f"flat: {msg.bits_per_value} bits per value, but the page stores {block.bits_per_value}"
        )
    return block


def fixed_size_list_per_value(msg: pb.FixedSizeList, block: DataBlock) -> DataBlock:
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"fixed_size_list: expected fixed-width values, got {type(block).__name__}")
    layers: list[tuple[int, bool]] = []
    cur = msg
    while True:
        dim = int(cur.items_per_value)
        if dim <= 0:
            raise CorruptFileError(f"fixed_size_list: dimension {dim}")
        layers.append((dim, bool(cur.has_validity)))
        inner = cur.values
        kind = inner.WhichOneof("compression")
        if kind == "fixed_size_list":
            cur = inner.fixed_size_list
            continue
        if kind != "flat":
            raise UnsupportedError(f"fixed_size_list: per-value items encoded as {kind}")
        if inner.flat.HasField("data"):
            raise UnsupportedError("fixed_size_list: buffer compression of the items is not supported")
        item_bits = int(inner.flat.bits_per_value)
        break
    if item_bits <= 0 or item_bits % 8:
        raise UnsupportedError(f"fixed_size_list: {item_bits}-bit items in a full-zip page")
    cum_dims = np.cumprod([d for d, _ in layers]).tolist()
    bitmap_bytes = [(c + 7) // 8 if v else 0 for c, (_, v) in zip(cum_dims, layers)]
    data_bytes = cum_dims[-1] * item_bits // 8
    row_bytes = sum(bitmap_bytes) + data_bytes
    if block.bits_per_value != row_bytes * 8:
        raise CorruptFileError(
            f"fixed_size_list: {block.bits_per_value} bits per value, layers imply {row_bytes * 8}"
        )
    n = block.num_values
    if block.data.size < n * row_bytes:
        raise CorruptFileError(f"fixed_size_list: {block.data.size} bytes for {n} values of {row_bytes}")
    mat = block.data[: n * row_bytes].reshape(n, row_bytes)
    validity: list[np.ndarray | None] = []
    col = 0
    for c, nb in zip(cum_dims, bitmap_bytes):
        if nb:
            bits = np.unpackbits(mat[:, col : col + nb], axis=1, bitorder="little")[:, :c]
            validity.append(bits.reshape(-1).view(bool))
            col += nb
        else:
            validity.append(None)
    items = np.ascontiguousarray(mat[:, col:]).reshape(-1) if col else mat.reshape(-1)
    out: DataBlock = FixedWidthBlock(items, item_bits, n * cum_dims[-1])
    for k in range(len(layers) - 1, -1, -1):
        outer = n * (cum_dims[k - 1] if k else 1)
        out = FixedSizeListBlock(out, layers[k][0], outer, validity[k])
    return out


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_value(seg: bytes) -> bytes:
    import zstandard

    if not seg:
        return b""
    raw_stream = len(seg) < 8 or (
        int.from_bytes(seg[:4], "little") == _ZSTD_MAGIC and not (seg[4] & 0x10)
    )
    try:
        if raw_stream:
            return zstandard.ZstdDecompressor().decompressobj().decompress(seg)
        size = int.from_bytes(seg[:8], "little")
        out = zstandard.ZstdDecompressor().decompress(seg[8:], max_output_size=max(size, 1))
    except zstandard.ZstdError as e:
        raise CorruptFileError(f"general zstd: value does not decompress ({e})") from e
    if len(out) != size:
        raise CorruptFileError(f"general zstd: value decompressed to {len(out)} bytes, prefix says {size}")
    return out


def _lz4_value(seg: bytes) -> bytes:
    import lz4.block

    if len(seg) < 4:
        raise CorruptFileError("general lz4: value shorter than its 4-byte size prefix")
    try:
        return lz4.block.decompress(seg)
    except Exception as e:  # lz4 raises LZ4BlockError (a RuntimeError subclass)
        raise CorruptFileError(f"general lz4: value does not decompress ({e})") from e


def general_per_value(msg: pb.General, block: DataBlock) -> DataBlock:
    """One codec call per value (the codec is per value by definition)."""
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(f"general: expected variable-width values, got {type(block).__name__}")
    scheme = msg.compression.scheme
    if scheme == pb.COMPRESSION_ALGORITHM_ZSTD:
        fn = _zstd_value
    elif scheme == pb.COMPRESSION_ALGORITHM_LZ4:
        fn = _lz4_value
    else:
        raise UnsupportedError(f"general: compression scheme {scheme}")
    offs = block.offsets.astype(np.int64)
    raw = block.data.tobytes()
    outs = [fn(raw[a:b]) for a, b in zip(offs[:-1].tolist(), offs[1:].tolist())]
    lens = np.fromiter((len(o) for o in outs), dtype=np.int64, count=len(outs))
    data = np.frombuffer(b"".join(outs), dtype=np.uint8)
    odt = block.offsets.dtype if data.size < 2**32 else np.dtype(np.uint64)
    offsets = np.zeros(len(outs) + 1, dtype=odt)
    offsets[1:] = np.cumsum(lens)
    inner = VariableWidthBlock(offsets, data, block.num_values)
    if msg.HasField("values"):
        from lance_spark_ops.encoding.layout.fullzip import per_value

        return per_value(msg.values, inner)
    return inner


FALLBACKS: dict[str, Callable[..., DataBlock]] = {
    "flat": flat_per_value,
    "fixed_size_list": fixed_size_list_per_value,
    "general": general_per_value,
}
