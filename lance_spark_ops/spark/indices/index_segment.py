"""The contract between the index driver (``spark.indices.indexing``: ``create_index``,
``optimize_indices``) and each index type's segment builder (issues #27, #28).

An index is one or more *segments*: manifest entries of one name, each with its own uuid,
files under ``_indices/<uuid>/``, fragment bitmap and details. The driver decides which
segments to build (a fresh build, a delta over unindexed fragments, a merge of old segments
with new data, a retrain), validates parameters before any Spark work, picks uuids, commits
one CreateIndex and cleans up after failures. A builder only turns one ``SegmentRequest``
into files (``BuiltSegment``), doing its heavy work in executor tasks through
``job.run_tasks``; the driver never touches the indexed data.

No I/O here: the picklable descriptors both sides share, and the builders' protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from lance_spark_ops.index.params import IndexParams
from lance_spark_ops.spark.runtime.job import Job


@dataclass(frozen=True)
class SegmentRequest:
    """One segment to build, as the driver planned it (picklable, a few KB).

    ``fragment_ids``: fragments whose live rows are indexed from the data. ``merge_with``:
    serialized ``IndexMetadata`` of old segments of this index folded into the new one (their
    entries on fragments still in the dataset are kept; entries of fragments no longer in the
    dataset are dropped). ``model_from``: the serialized ``IndexMetadata`` of the segment whose
    trained state (IVF centroids, PQ codebooks, SQ bounds, tokenizer settings...) a delta or
    merge must reuse instead of training afresh; None for a fresh build or a retrain.
    ``row_ids``: the index names rows by stable row id (``True``) or by row address."""

    uri: str
    read_version: int
    kind: str                      # BTREE, BITMAP, ..., INVERTED, IVF_PQ, IVF_HNSW_SQ, ...
    column: str                    # the indexed column's name (dotted path for nested fields)
    field_id: int
    name: str
    params: IndexParams            # as the builder's ``check_params`` / ``params_of`` returned them
    new_uuid: bytes                # 16 bytes; files go to ``_indices/<uuid_str(new_uuid)>/``
    fragment_ids: tuple[int, ...]
    merge_with: tuple[bytes, ...] = ()
    model_from: bytes | None = None
    row_ids: bool = False
    # a default optimize of a vector index (pylance 14): ``merge_with`` (every segment) folds in
    # only when a partition is due a split or join, else the segment is a delta
    fold_if_adjusted: bool = False
    file_version: str = "2.0"      # the version of the .lance files the segment is written in
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # secrets


@dataclass(frozen=True)
class BuiltSegment:
    """What a builder wrote for one ``SegmentRequest``: file names (relative to the segment's
    directory) with sizes, the entry's ``index_details`` (a serialized
    ``google.protobuf.Any``) and ``index_version``, and the rows it indexes."""

    files: tuple[tuple[str, int], ...]
    details: bytes
    index_version: int
    rows_indexed: int
    folded: bool = True  # False: a ``fold_if_adjusted`` request that became a delta

    @property
    def bytes_written(self) -> int:
        return sum(n for _, n in self.files)


@runtime_checkable
class SegmentBuilder(Protocol):
    """One per family of index types (scalar kinds, FTS, vector kinds). Builders subclass it,
    so the capabilities they do not override keep these defaults."""

    kinds: frozenset[str]
    # ``build_many`` shares Spark jobs between several requests (a tiered round): the driver
    # hands such a builder a round's requests together, and builds the others' one by one
    batches: bool = False

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> IndexParams:
        """Driver, before Spark starts: parse pylance's keyword arguments for ``kind`` on a column
        of ``field``'s type once into the family's typed parameters (defaults filled in); raise
        ``InvalidInputError`` naming the bad parameter or type (the job exits 2)."""

    def params_of(self, kind: str, index: Any) -> IndexParams:
        """Driver: the parameters an existing segment (``IndexMetadata``) was built with, read
        from its details (and, where pylance keeps them there, its files), so a delta or merge
        builds alike and ``retrain`` rebuilds alike."""

    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        """Driver: build the segment with executor tasks (``job.run_tasks``), writing under
        ``_indices/<uuid>/``. Attempts of a task must write the same paths or name files by
        ``TaskContext.file_prefix`` and leave nothing referenced but the final files."""
        raise NotImplementedError

    def build_many(self, job: Job, reqs: Sequence[SegmentRequest]) -> list[BuiltSegment]:
        """Driver: the segments of several requests, in order (``batches`` builders share Spark
        jobs between them; this default builds one after another)."""
        return [self.build(job, r) for r in reqs]
