"""Test stand-in for the index driver (``spark.indices.indexing``) until it lands: build one segment
with a ``SegmentBuilder`` and commit its CreateIndex entry as the driver will (name, field,
fragment bitmap, dataset_version, created_at, files, details, index_version)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from google.protobuf import any_pb2
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.spark.indices.index_segment import SegmentRequest
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import CreateIndex


def entries(ds: Dataset, name: str) -> list[Any]:
    section = ds.manifest_file.index_section
    return [i for i in (section.indices if section is not None else []) if i.name == name]


def build_and_commit(builder: Any, spark: Any, uri: str, column: str, kind: str, name: str, *,
                     fragment_ids: Sequence[int] | None = None, merge: bool = False,
                     params: dict[str, Any] | None = None, tuning: Tuning | None = None
                     ) -> tuple[Dataset, Any]:
    """A fresh segment over ``fragment_ids`` (default: every fragment), or with ``merge`` the
    index's newest segment folded in with the fragments it does not cover (pylance's default
    ``optimize_indices``); ``tuning``: the job's task shapes. Returns the new version and the
    BuiltSegment."""
    ds = Dataset.open(uri)
    field = next(f for f in ds.lance_schema.fields if f.name == column)
    olds = entries(ds, name) if merge else []
    old = olds[-1:] if olds else []
    covered = BitMap()
    for o in olds:
        covered |= BitMap.deserialize(bytes(o.fragment_bitmap))
    present = [f.id for f in ds.fragments]
    if fragment_ids is None:
        fragment_ids = [i for i in present if i not in covered] if merge else present
    checked = builder.check_params(kind, ds.schema.field(column), params or {})
    req = SegmentRequest(uri=uri, read_version=ds.version, kind=kind, column=column, field_id=field.id,
                         name=name, params=checked, new_uuid=uuid.uuid4().bytes,
                         fragment_ids=tuple(fragment_ids),
                         merge_with=tuple(o.SerializeToString() for o in old),
                         row_ids=ds.uses_stable_row_ids, file_version=ds.data_storage_version)
    with Job(spark, "test_build_index", uri, tuning=tuning) as job:
        built = builder.build(job, req)
    meta = table_pb2.IndexMetadata(name=name, fields=[field.id], created_at=int(time.time() * 1000),
                                   index_version=built.index_version)
    meta.uuid.uuid = req.new_uuid
    bitmap = BitMap(fragment_ids)
    for o in old:
        bitmap |= BitMap.deserialize(bytes(o.fragment_bitmap)) & BitMap(present)
    bitmap.run_optimize()  # pylance's fragment bitmaps hold run containers
    meta.fragment_bitmap = bytes(bitmap.serialize())
    meta.dataset_version = min([o.dataset_version for o in old] or [ds.version])
    meta.index_details.CopyFrom(any_pb2.Any.FromString(built.details))
    meta.files.extend(table_pb2.IndexFile(path=p, size_bytes=n) for p, n in built.files)
    # a CreateIndex replaces every entry of the name: the segments kept are listed again
    removed = {bytes(o.uuid.uuid) for o in old}
    siblings = [i for i in entries(ds, name) if bytes(i.uuid.uuid) not in removed]
    result = commit_transaction(ds.store, CreateIndex([meta, *siblings], list(old)), ds.version)
    return Dataset.from_commit(result), built
