"""The models of existing vector index segments, read on the driver from their files' global
buffers and metadata only (never their rows): a delta or merge reuses one
(``SegmentRequest.model_from``), and a merge folds in the rows of segments of that same
model only (``foldable``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lance_spark_ops._pb import index_pb2, table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import index_kind, uuid_str
from lance_spark_ops.index.vector import rabitq
from lance_spark_ops.index.vector.ivf import AUX_FILE, INDEX_FILE, ivf_buffer
from lance_spark_ops.index.vector.ivf_build import from_tensor, quantizer_of, read_details
from lance_spark_ops.index.vector.ivf_model import Model
from lance_spark_ops.index.vector.ivf_split import partition_adjustment
from lance_spark_ops.index.vector.vector_space import _storage_metadata
from lance_spark_ops.table.dataset import Dataset


def adjustment_due(ds: Dataset, kind: str, segments: Sequence[Any], new_counts: np.ndarray | None,
                   target: int) -> tuple[list[tuple[int, int]], list[int], np.ndarray]:
    """pylance 14's default optimize: the splits and joins (``partition_adjustment``) the rows
    per partition (``new_counts``, the new rows as encoded, plus every segment's storage rows)
    call for, and those sizes. Segments of another partition count are left out, as pylance
    skips partitions they lack."""
    k = read_model(ds, kind, segments[-1]).num_partitions
    sizes = np.zeros(k, np.int64) if new_counts is None else np.asarray(new_counts, np.int64).copy()
    for s in segments:
        try:
            sizes += segment_lengths(ds, s, k)
        except InvalidInputError:
            continue
    splits, joins = partition_adjustment(sizes.tolist(), target)
    return splits, joins, sizes


def read_model(ds: Dataset, kind: str, index: Any, cache: dict[bytes, Model] | None = None) -> Model:
    """The centroids and quantizer of an existing segment (its files' global buffers only);
    ``cache``: models already read, by segment uuid (files never change under a uuid)."""
    key = bytes(index.uuid.uuid)
    if cache is not None and key in cache:
        return cache[key]
    model = _read_model(ds, kind, index)
    if cache is not None:
        cache[key] = model
    return model


def _read_model(ds: Dataset, kind: str, index: Any) -> Model:
    base = index.base_id if index.HasField("base_id") else None
    store, seg = ds.base_resolver.index_dir(uuid_str(index.uuid.uuid), base)
    d = read_details(index.index_details.value)
    metric = {index_pb2.L2: "l2", index_pb2.Cosine: "cosine", index_pb2.Dot: "dot"}[d.metric_type]
    ireader = LanceFileReader(f"{seg}/{INDEX_FILE}", store=store)
    ivf = index_pb2.IVF.FromString(_buffer(ireader, ivf_buffer(ireader.schema)))
    if not ivf.HasField("centroids_tensor"):
        raise CorruptFileError(f"{INDEX_FILE}: the IVF has no centroids_tensor", path=ireader.path)
    centroids = from_tensor(ivf.centroids_tensor, INDEX_FILE)
    areader = LanceFileReader(f"{seg}/{AUX_FILE}", store=store)
    meta = _storage_metadata(areader.schema)
    q = quantizer_of(kind)
    loss = ivf.loss if ivf.HasField("loss") else None
    need = {"PQ": ("num_sub_vectors", "codebook_position"), "SQ": ("bounds",)}.get(q, ())
    if any(key not in meta for key in need):
        raise CorruptFileError(
            f"{AUX_FILE}: storage_metadata of a {kind} index lacks {need}", path=areader.path
        )
    if q == "PQ":
        m, nbits = int(meta["num_sub_vectors"]), int(meta.get("nbits", 8))
        book = from_tensor(
            index_pb2.Tensor.FromString(_buffer(areader, int(meta["codebook_position"]))), AUX_FILE
        )
        return Model(
            kind, metric, centroids, loss, codebook=book.reshape(m, 1 << nbits, -1), m=m, nbits=nbits
        )
    if q == "SQ":
        b = meta.get("bounds") or {}
        return Model(kind, metric, centroids, loss, bounds=(float(b["start"]), float(b["end"])))
    if q == "RQ":
        matrix = None
        if meta.get("rotation_type") == "matrix":
            pos = meta.get("rotate_mat_position")
            if not isinstance(pos, int):
                raise CorruptFileError(f"{AUX_FILE}: a matrix RaBitQ rotation without rotate_mat_position",
                                       path=areader.path)
            matrix = from_tensor(index_pb2.Tensor.FromString(_buffer(areader, pos)), AUX_FILE)
        try:
            rb = rabitq.from_metadata(meta, matrix)
        except InvalidInputError as e:
            raise CorruptFileError(f"{AUX_FILE}: storage_metadata: {e}", path=areader.path) from e
        return Model(kind, metric, centroids, loss, nbits=rb.num_bits, rabit=rb)
    return Model(kind, metric, centroids, loss)


def foldable(
    ds: Dataset, kind: str, model: Model, merge_with: Sequence[bytes], cache: dict[bytes, Model] | None = None
) -> tuple[list[bytes], set[int]]:
    """The segments whose rows fold into the new one as they are (same model: centroids and
    quantizer equal), and the fragments (still present) of the others, to encode again
    (``cache``: as ``read_model``'s)."""
    from pyroaring import BitMap

    present = {f.id for f in ds.fragments}
    same, refit = [], set()
    for raw in merge_with:
        meta = table_pb2.IndexMetadata.FromString(raw)
        if index_kind(meta) == kind and same_model(read_model(ds, kind, meta, cache), model):
            same.append(raw)
        else:
            refit |= (
                set(BitMap.deserialize(meta.fragment_bitmap)) & present if meta.fragment_bitmap else set()
            )
    return same, refit


def same_model(a: Model, b: Model) -> bool:
    def eq(x: np.ndarray | None, y: np.ndarray | None) -> bool:
        return (x is None) == (y is None) and (x is None or (x.shape == y.shape and np.array_equal(x, y)))

    return (
        (a.kind, a.metric, a.m, a.nbits, a.bounds) == (b.kind, b.metric, b.m, b.nbits, b.bounds)
        and eq(a.centroids, b.centroids)
        and eq(a.codebook, b.codebook)
        and (a.rabit is None) == (b.rabit is None)
        and (a.rabit is None or a.rabit.same(b.rabit))
    )


def segment_lengths(ds: Dataset, index: Any, partitions: int) -> np.ndarray:
    """Rows per partition of an existing segment's storage (its IVF buffer only)."""
    base = index.base_id if index.HasField("base_id") else None
    store, seg = ds.base_resolver.index_dir(uuid_str(index.uuid.uuid), base)
    reader = LanceFileReader(f"{seg}/{AUX_FILE}", store=store)
    lengths = np.asarray(
        index_pb2.IVF.FromString(_buffer(reader, ivf_buffer(reader.schema))).lengths, np.int64
    )
    if lengths.size != partitions:
        raise InvalidInputError(
            f"index {index.name!r}: a segment of {lengths.size} partitions cannot merge into {partitions}"
        )
    return lengths


def _buffer(reader: LanceFileReader, index: int) -> bytes:
    gb = reader.metadata.global_buffers.tolist()
    if index < 1 or index >= len(gb):
        raise CorruptFileError(f"no global buffer {index}", path=reader.path)
    off, size = gb[index]
    return bytes(reader.read_raw_ranges([(int(off), int(size))])[0])
