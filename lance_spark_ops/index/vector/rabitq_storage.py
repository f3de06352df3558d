"""IVF_RQ storage as pylance 14 writes it (no I/O): ``auxiliary.idx``'s columns after
``_rowid`` - ``_rabit_codes`` (each partition's binary codes packed for Lance's 4-bit lookup
kernel: blocks of 32 rows interleaved, the leftover rows transposed), ``__add_factors``,
``__scale_factors``, ``__error_factors`` and, above 1 bit, ``__blocked_ex_codes``,
``__add_factors_ex``, ``__scale_factors_ex``; and the opaque storage rows the build tasks pass
around (``rabitq`` computes what they hold). Also the remap of a stored table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.vector.rabitq import Encoded, RabitModel

CODE_COLUMN = "_rabit_codes"
EX_CODE_COLUMN = "__blocked_ex_codes"
FACTOR_COLUMNS = ("__add_factors", "__scale_factors", "__error_factors")
EX_FACTOR_COLUMNS = ("__add_factors_ex", "__scale_factors_ex")


PERM0 = np.array([0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15])
BATCH = 32


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """One partition's binary codes (n x w) in Lance's packed layout: blocks of 32 rows
    interleaved for its 4-bit lookup kernel, the rest transposed (w blocks of the leftover)."""
    n, w = codes.shape
    full = n // BATCH * BATCH
    out = np.empty(n * w, dtype=np.uint8)
    if full:
        blk = codes[:full].reshape(-1, BATCH, w)  # (blocks, 32, w)
        lo, hi = blk & 15, blk >> 4
        lo_p = lo[:, PERM0, :] | (lo[:, PERM0 + 16, :] << 4)
        hi_p = hi[:, PERM0, :] | (hi[:, PERM0 + 16, :] << 4)
        packed = np.concatenate([lo_p, hi_p], axis=1)  # (blocks, 32, w)
        out[: full * w] = packed.transpose(0, 2, 1).reshape(-1)
    out[full * w :] = codes[full:].T.reshape(-1)
    return out.reshape(n, w)


def unpack_codes(packed: np.ndarray) -> np.ndarray:
    """The inverse of ``pack_codes`` (one partition)."""
    n, w = packed.shape
    full = n // BATCH * BATCH
    flat = packed.reshape(-1)
    out = np.empty((n, w), dtype=np.uint8)
    if full:
        blk = flat[: full * w].reshape(-1, w, BATCH).transpose(0, 2, 1)  # (blocks, 32, w)
        v0, v1 = blk[:, :16, :], blk[:, 16:, :]
        rows = np.empty((blk.shape[0], BATCH, w), dtype=np.uint8)
        rows[:, PERM0, :] = (v0 & 15) | ((v1 & 15) << 4)
        rows[:, PERM0 + 16, :] = (v0 >> 4) | ((v1 >> 4) << 4)
        out[:full] = rows.reshape(full, w)
    out[full:] = flat[full * w :].reshape(w, n - full).T
    return out


# Between build tasks a row is opaque bytes: binary codes, ex codes, then the factors as
# float32 (add, scale, error, ex add, ex scale - the last two only with ex codes).


def factor_count(model: RabitModel) -> int:
    return 5 if model.ex_bits else 3


def row_width(model: RabitModel) -> int:
    """Bytes of one storage row."""
    return model.code_bytes + model.ex_code_bytes + 4 * factor_count(model)


def to_rows(model: RabitModel, enc: Encoded) -> np.ndarray:
    """n x ``row_width`` uint8 rows of encoded vectors."""
    n = enc.codes.shape[0]
    floats = [enc.add, enc.scale, enc.error] + ([enc.ex_add, enc.ex_scale] if model.ex_bits else [])
    f = np.ascontiguousarray(np.stack(floats, axis=1).astype("<f4")).view(np.uint8).reshape(n, -1)
    parts = [enc.codes] + ([enc.ex_codes] if model.ex_bits else []) + [f]
    return np.concatenate(parts, axis=1).astype(np.uint8, copy=False)


def residual_norm_squares(model: RabitModel, rows: np.ndarray, rotated_centroid: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """l2 (and cosine) storage rows of one partition: each row's squared distance to the
    partition's centroid as its factors hold it, and a bound on that estimate's float32
    rounding. With s the codes' +-1/2 sign vector, add = |r|^2 + 2 |r|^2 <c, s> / <r, s> and
    scale = -2 |r|^2 / <r, s> (both 0-safe: scale 0 when <r, s> is), so |r|^2 = add + <c, s> scale."""
    w = model.code_bytes + model.ex_code_bytes
    f = np.ascontiguousarray(rows[:, w : w + 8]).view("<f4").astype(np.float64)
    # <c, s> byte by byte: a table of each byte value's sum over its 8 dimensions
    c = np.zeros(model.code_bytes * 8)
    c[: model.dim] = np.asarray(rotated_centroid, np.float64)[: model.dim]
    signs = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little") - 0.5
    table = c.reshape(-1, 8) @ signs.T  # (code bytes, 256)
    codes = rows[:, : model.code_bytes]
    cent = table[np.arange(model.code_bytes), codes].sum(axis=1) if rows.shape[0] else np.zeros(0)
    term = cent * f[:, 1]
    return f[:, 0] + term, 1e-4 * (np.abs(f[:, 0]) + np.abs(term)) + 1e-6


def storage_fields(model: RabitModel) -> list[pa.Field]:
    """``auxiliary.idx``'s columns after ``_rowid`` (all nullable, as pylance writes them)."""
    f32 = pa.float32()
    out = [pa.field(CODE_COLUMN, pa.list_(pa.uint8(), model.code_bytes))]
    out += [pa.field(name, f32) for name in FACTOR_COLUMNS]
    if model.ex_bits:
        out.append(pa.field(EX_CODE_COLUMN, pa.list_(pa.uint8(), model.ex_code_bytes)))
        out += [pa.field(name, f32) for name in EX_FACTOR_COLUMNS]
    return out


def _partition_codes(codes: np.ndarray, lengths: np.ndarray, pack: bool) -> np.ndarray:
    fn = pack_codes if pack else unpack_codes
    out = np.empty_like(codes)
    pos = 0
    for n in np.asarray(lengths, np.int64).tolist():
        if n:
            out[pos : pos + n] = fn(codes[pos : pos + n])
        pos += n
    return out


def storage_table(model: RabitModel, schema: pa.Schema, ids: np.ndarray, rows: np.ndarray,
                  lengths: np.ndarray, pack: bool = True) -> pa.Table:
    """The ``auxiliary.idx`` rows of whole partitions (``lengths``) from storage rows: each
    partition's binary codes packed (unless not ``pack``), the factors as columns."""
    rows = np.asarray(rows, dtype=np.uint8).reshape(-1, row_width(model))
    cb, eb, nf = model.code_bytes, model.ex_code_bytes, factor_count(model)
    codes = np.ascontiguousarray(rows[:, :cb])
    if pack:
        codes = _partition_codes(codes, lengths, pack=True)
    f = np.ascontiguousarray(rows[:, cb + eb :]).view("<f4").reshape(-1, nf)

    def fsl(a: np.ndarray, w: int) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(a).reshape(-1)), w)

    cols = [pa.array(np.asarray(ids, np.uint64)), fsl(codes, cb)] + [pa.array(f[:, i]) for i in range(3)]
    if model.ex_bits:
        cols += [fsl(rows[:, cb : cb + eb], eb), pa.array(f[:, 3]), pa.array(f[:, 4])]
    return pa.Table.from_arrays(cols, schema=schema)


def table_rows(model: RabitModel, table: pa.Table, lengths: np.ndarray,
               packed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, storage rows) of whole partitions of an ``auxiliary.idx`` table (``packed``:
    the storage metadata's flag, each partition's codes in the packed layout)."""
    names = [f.name for f in storage_fields(model)]
    missing = [n for n in names if n not in table.schema.names]
    if missing:
        raise CorruptFileError(f"auxiliary.idx of an IVF_RQ index lacks columns {missing}")
    n = table.num_rows
    if int(np.sum(lengths)) != n:
        raise CorruptFileError(f"auxiliary.idx: partitions hold {int(np.sum(lengths))} rows, the file {n}")

    def mat(name: str, w: int) -> np.ndarray:
        col = table.column(name).combine_chunks()
        if col.type.list_size != w:
            raise CorruptFileError(f"auxiliary.idx: {name} holds {col.type.list_size} bytes a row, "
                                   f"expected {w}")
        return col.values.to_numpy(zero_copy_only=False).reshape(n, w).astype(np.uint8, copy=False)

    codes = mat(CODE_COLUMN, model.code_bytes)
    if packed:
        codes = _partition_codes(codes, lengths, pack=False)
    floats = [table.column(c).to_numpy().astype("<f4") for c in FACTOR_COLUMNS]
    parts = [codes]
    if model.ex_bits:
        parts.append(mat(EX_CODE_COLUMN, model.ex_code_bytes))
        floats += [table.column(c).to_numpy().astype("<f4") for c in EX_FACTOR_COLUMNS]
    parts.append(np.ascontiguousarray(np.stack(floats, axis=1)).view(np.uint8).reshape(n, -1))
    ids = table.column("_rowid").to_numpy().astype(np.uint64)
    return ids, np.concatenate(parts, axis=1)


def remap_table(table: pa.Table, lengths: np.ndarray, keep: np.ndarray, new_ids: np.ndarray,
                meta: dict) -> tuple[pa.Table, np.ndarray]:
    """An IVF_RQ ``auxiliary.idx`` table after a remap (rows ``keep``, their new ids; order
    within each partition kept, codes packed again over the shorter partitions when they are
    packed) and its new partition lengths - pylance 14's ``RabitQuantizationStorage::remap``.
    Every other column is filtered as it is, so older layouts (no error factors, no ex codes)
    remap too."""
    if CODE_COLUMN not in table.schema.names:
        raise CorruptFileError(f"auxiliary.idx of an IVF_RQ index lacks {CODE_COLUMN}")
    part = np.repeat(np.arange(len(lengths)), lengths)
    new_lengths = np.bincount(part[keep], minlength=len(lengths)).astype(np.int64)
    mask = pa.array(keep)
    cols = []
    for name in table.schema.names:
        col = table.column(name).combine_chunks()
        if name == "_rowid":
            cols.append(pa.array(new_ids, col.type))
        elif name == CODE_COLUMN and meta.get("packed", False):
            w = col.type.list_size
            codes = col.values.to_numpy(zero_copy_only=False).astype(np.uint8).reshape(-1, w)
            rows = _partition_codes(codes, lengths, pack=False)[keep]
            codes = _partition_codes(rows, new_lengths, pack=True)
            cols.append(pa.FixedSizeListArray.from_arrays(pa.array(codes.reshape(-1)), w).cast(col.type))
        else:
            cols.append(col.filter(mask))
    return pa.Table.from_arrays(cols, schema=table.schema), new_lengths
