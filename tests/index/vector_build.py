"""Build a vector index segment with ``VECTOR_BUILDER`` and commit it as the index driver
(``spark.indices.indexing``) will: one CreateIndex entry (uuid, fields, name, dataset_version,
fragment bitmap, details, index_version, files)."""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from google.protobuf import any_pb2
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.spark.indices.index_segment import SegmentRequest
from lance_spark_ops.spark.indices.vector_index import VECTOR_BUILDER
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import CreateIndex


def build_index(
    uri: str,
    column: str,
    kind: str,
    name: str,
    spark: Any = None,
    *,
    fragment_ids: list[int] | None = None,
    model_from: Any = None,
    merge_with: list[Any] = (),
    replace: bool = True,
    tuning: Tuning | None = None,
    **params: Any,
) -> Any:
    """Build and commit; returns the new IndexMetadata."""
    ds = Dataset.open(uri)
    field = ds.schema.field(column)
    lance_field = next(f for f in ds.lance_schema.fields if f.name == column)
    if model_from is not None:  # a delta builds with the segment's own parameters, as the driver
        params = {k: v for k, v in VECTOR_BUILDER.params_of(kind, model_from).items() if v is not None}
    checked = VECTOR_BUILDER.check_params(kind, field, params)
    frags = fragment_ids if fragment_ids is not None else [f.id for f in ds.fragments]
    new_uuid = uuidlib.uuid4().bytes
    req = SegmentRequest(
        uri=uri,
        read_version=ds.version,
        kind=kind,
        column=column,
        field_id=lance_field.id,
        name=name,
        params=checked,
        new_uuid=new_uuid,
        fragment_ids=tuple(frags),
        model_from=model_from.SerializeToString() if model_from is not None else None,
        merge_with=tuple(m.SerializeToString() for m in merge_with),
        row_ids=ds.uses_stable_row_ids,
        file_version=_file_version(ds),
    )
    with Job(spark, "create_index", uri, tuning=tuning) as job:
        built = VECTOR_BUILDER.build(job, req)
    entry = table_pb2.IndexMetadata(
        name=name,
        dataset_version=ds.version,
        index_version=built.index_version,
        created_at=int(time.time() * 1000),
    )
    entry.uuid.uuid = new_uuid
    entry.fields.append(lance_field.id)
    entry.fragment_bitmap = bytes(BitMap(frags).serialize())
    entry.index_details.CopyFrom(any_pb2.Any.FromString(built.details))
    entry.files.extend(table_pb2.IndexFile(path=p, size_bytes=n) for p, n in built.files)
    section = ds.manifest_file.index_section
    same = [i for i in (section.indices if section is not None else []) if i.name == name]
    # a CreateIndex replaces every entry named like a new one: a delta lists the old segments again
    merged = {bytes(m.uuid.uuid) for m in merge_with}
    if merge_with:  # the merged segments leave, their fragments join the new one
        old = {f for m in merge_with for f in BitMap.deserialize(m.fragment_bitmap)}
        frags = sorted(set(frags) | (old & {f.id for f in ds.fragments}))
        entry.fragment_bitmap = bytes(BitMap(frags).serialize())
    keep = [i for i in same if bytes(i.uuid.uuid) not in merged]
    new, removed = (
        ([entry], same) if replace else ([*keep, entry], [i for i in same if bytes(i.uuid.uuid) in merged])
    )
    commit_transaction(ds.store, CreateIndex(new, removed), ds.version)
    return entry


def _file_version(ds: Dataset) -> str:
    v = ds.data_storage_version
    return "2.0" if v in ("legacy", "0.1") else v
