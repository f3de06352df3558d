"""IVF vector index storage (``auxiliary.idx`` of IVF_FLAT / IVF_PQ / IVF_SQ / IVF_HNSW_*) and
its remap (no I/O).

``auxiliary.idx`` holds ``_rowid`` (uint64 row addresses) and one storage column (IVF_FLAT:
the vectors; IVF_PQ: ``__pq_code`` fixed-size lists of uint8; IVF_SQ: ``__sq_code``, the same
for the HNSW variants; IVF_RQ: ``_rabit_codes`` and its factor columns, ``rabitq``), rows grouped
by partition; the
partition table is an ``IVF`` protobuf (offsets, lengths) in the global buffer named by the
schema metadata ``lance:ivf`` (1 as pylance 14 writes it; the PQ codebook follows in buffer
2). With ``"transposed": true`` in ``storage_metadata`` the PQ codes of a partition of n rows
are stored sub-vector major: m blocks of n codes. ``index.idx`` (centroids; its own offsets
and lengths are zeros) does not change, except for IVF_HNSW_* (``hnsw_file``). pylance 14's
remap drops deleted rows and rewrites addresses, keeping the order within each partition.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.index.address_map import RowAddressMap

AUX_FILE = "auxiliary.idx"
RQ_CODE_COLUMN = "_rabit_codes"  # rabitq_storage.CODE_COLUMN (IVF_RQ's storage: several columns)
INDEX_FILE = "index.idx"
IVF_KEY = b"lance:ivf"


def ivf_buffer(schema: pa.Schema) -> int:
    raw = (schema.metadata or {}).get(IVF_KEY)
    try:
        index = int(raw) if raw is not None else -1
    except ValueError:
        index = -1
    if index < 1:
        raise CorruptFileError(f"{AUX_FILE}: schema metadata {IVF_KEY.decode()} = {raw!r} names no "
                               "global buffer")
    return index


def pq_transposed(schema: pa.Schema) -> bool:
    raw = (schema.metadata or {}).get(b"storage_metadata")
    if raw is None:
        return False
    try:
        items = json.loads(raw)
        return any(json.loads(x).get("transposed", False) for x in items)
    except (ValueError, AttributeError, TypeError) as e:
        raise CorruptFileError(f"{AUX_FILE}: storage_metadata does not parse ({e})") from e


def _codes(col: pa.Array) -> tuple[np.ndarray, int]:
    m = col.type.list_size
    return col.values.to_numpy(zero_copy_only=False).reshape(-1), m


def _transpose_blocks(flat: np.ndarray, m: int, lengths: np.ndarray, to_rows: bool) -> np.ndarray:
    """Per partition, sub-vector-major (m x n) <-> row-major (n x m); one step per partition."""
    out = np.empty_like(flat)
    pos = 0
    for n in lengths.tolist():
        block = flat[pos * m:(pos + n) * m]
        shaped = block.reshape(m, n).T if to_rows else block.reshape(n, m).T
        out[pos * m:(pos + n) * m] = shaped.reshape(-1)
        pos += n
    return out


PART_ID_COLUMN = "__ivf_part_id"


def without_partition_ids(table: pa.Table, ivf: index_pb2.IVF) -> pa.Table:
    """The storage table without the ``__ivf_part_id`` column pylance 0.20 also stored (each
    row's partition, which the partition lengths already say; pylance 14 drops it when it
    rewrites the file). CorruptFileError when the column disagrees with the lengths."""
    if PART_ID_COLUMN not in table.schema.names:
        return table
    lengths = np.asarray(ivf.lengths, dtype=np.int64)
    parts = table.column(PART_ID_COLUMN).to_numpy(zero_copy_only=False)
    if parts.size != lengths.sum() or \
            not np.array_equal(parts, np.repeat(np.arange(lengths.size), lengths)):
        raise CorruptFileError(f"{AUX_FILE}: column {PART_ID_COLUMN} disagrees with the partition lengths")
    return table.drop_columns([PART_ID_COLUMN])


def remap_storage(table: pa.Table, ivf: index_pb2.IVF, amap: RowAddressMap,
                  transposed: bool) -> tuple[pa.Table, index_pb2.IVF]:
    """The storage table and partition table after the remap."""
    if RQ_CODE_COLUMN in table.schema.names:
        return _remap_rq(table, ivf, amap)
    if table.num_columns != 2 or table.schema.names[0] != "_rowid":
        # (pylance 0.20's __ivf_part_id column is dropped first: ``without_partition_ids``)
        raise UnsupportedError(f"{AUX_FILE}: columns {table.schema.names}, expected _rowid and one storage "
                               "column")
    lengths = np.asarray(ivf.lengths, dtype=np.int64)
    if lengths.sum() != table.num_rows:
        raise CorruptFileError(f"{AUX_FILE}: partitions hold {lengths.sum()} rows, the file {table.num_rows}")
    table = table.combine_chunks()
    keep, new_ids = amap.apply(table.column(0).to_numpy())
    part = np.repeat(np.arange(lengths.size), lengths)
    new_lengths = np.bincount(part[keep], minlength=lengths.size).astype(np.int64)
    col = table.column(1).chunk(0) if table.column(1).num_chunks else table.column(1).combine_chunks()
    if transposed:
        flat, m = _codes(col)
        rows = _transpose_blocks(flat, m, lengths, to_rows=True).reshape(-1, m)[keep]
        packed = _transpose_blocks(rows.reshape(-1), m, new_lengths, to_rows=False)
        new_col = pa.FixedSizeListArray.from_arrays(pa.array(packed, col.type.value_type), m)
    else:
        new_col = col.filter(pa.array(keep))
    ids = pa.array(new_ids, table.schema.field(0).type)
    out = pa.Table.from_arrays([ids, new_col.cast(table.schema.field(1).type)], schema=table.schema)
    return out, _with_lengths(ivf, new_lengths)


def _with_lengths(ivf: index_pb2.IVF, new_lengths: np.ndarray) -> index_pb2.IVF:
    new_ivf = index_pb2.IVF()
    new_ivf.CopyFrom(ivf)
    del new_ivf.offsets[:]
    del new_ivf.lengths[:]
    new_ivf.offsets.extend(np.concatenate([[0], np.cumsum(new_lengths)[:-1]]).astype(np.uint64).tolist()
                           if new_lengths.size else [])
    new_ivf.lengths.extend(new_lengths.tolist())
    return new_ivf


def _remap_rq(table: pa.Table, ivf: index_pb2.IVF, amap: RowAddressMap) -> tuple[pa.Table, index_pb2.IVF]:
    """IVF_RQ: every RaBitQ column filtered, each partition's codes packed again."""
    from lance_spark_ops.index.vector import rabitq_storage

    raw = (table.schema.metadata or {}).get(b"storage_metadata")
    try:
        meta = json.loads(json.loads(raw)[0])
    except (TypeError, ValueError, IndexError) as e:
        raise CorruptFileError(f"{AUX_FILE}: storage_metadata does not parse ({e})") from e
    lengths = np.asarray(ivf.lengths, dtype=np.int64)
    if lengths.sum() != table.num_rows:
        raise CorruptFileError(f"{AUX_FILE}: partitions hold {lengths.sum()} rows, the file {table.num_rows}")
    table = table.combine_chunks()
    keep, new_ids = amap.apply(table.column(0).to_numpy())
    out, new_lengths = rabitq_storage.remap_table(table, lengths, keep, new_ids, meta)
    return out, _with_lengths(ivf, new_lengths)
