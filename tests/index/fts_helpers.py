"""Build an INVERTED segment with ``FTS_BUILDER`` and commit it as the driver will (until
``spark.indices.indexing`` lands): one CreateIndex with the BuiltSegment's files and details."""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.spark.indices.fts_index import FTS_BUILDER
from lance_spark_ops.spark.indices.index_segment import SegmentRequest
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import CreateIndex


def build_fts(spark: Any, uri: str, column: str = "text", name: str | None = None,
              fragment_ids: list[int] | None = None, merge_with: list[Any] = (), tuning: Tuning | None = None,
              **params: Any) -> Any:
    ds = Dataset.open(uri)
    field = ds.schema.field(column)
    full = FTS_BUILDER.check_params("INVERTED", field, params)
    field_id = next(f.id for f in ds.lance_schema.fields if f.name == column)
    frags = fragment_ids if fragment_ids is not None else [f.id for f in ds.fragments]
    new_uuid = uuidlib.uuid4().bytes
    req = SegmentRequest(uri=uri, read_version=ds.version, kind="INVERTED", column=column, field_id=field_id,
                         name=name or f"{column}_idx", params=full, new_uuid=new_uuid,
                         fragment_ids=tuple(frags),
                         merge_with=tuple(m.SerializeToString() for m in merge_with),
                         row_ids=ds.uses_stable_row_ids, file_version=_file_version(ds))
    with Job(spark, "create_index", uri, tuning=tuning) as job:
        built = FTS_BUILDER.build(job, req)
    covered = set(frags)
    versions = [ds.version]
    for m in merge_with:
        covered |= set(BitMap.deserialize(m.fragment_bitmap))
        versions.append(m.dataset_version)
    meta = table_pb2.IndexMetadata(name=req.name, fields=[field_id], dataset_version=min(versions),
                                   index_version=built.index_version, created_at=int(time.time() * 1000),
                                   fragment_bitmap=bytes(BitMap(sorted(covered)).serialize()))
    meta.uuid.uuid = new_uuid
    meta.index_details.ParseFromString(built.details)
    for path, size in built.files:
        meta.files.add(path=path, size_bytes=size)
    commit_transaction(ds.store, CreateIndex([meta], list(merge_with)), ds.version)
    return built


def _file_version(ds: Dataset) -> str:
    v = ds.data_storage_version
    return "2.0" if v in ("legacy", "0.1") else v


def build_fts_delta(uri: str, model: Any, fragment_ids: list[int]) -> Any:
    """A delta segment over ``fragment_ids`` built like ``model`` (``model_from``), committed
    beside it (what ``optimize_indices(num_indices_to_merge=0)`` does)."""
    ds = Dataset.open(uri)
    new_uuid = uuidlib.uuid4().bytes
    req = SegmentRequest(uri=uri, read_version=ds.version, kind="INVERTED", column="text",
                         field_id=model.fields[0], name=model.name, params={}, new_uuid=new_uuid,
                         fragment_ids=tuple(fragment_ids), model_from=model.SerializeToString(),
                         row_ids=ds.uses_stable_row_ids, file_version=_file_version(ds))
    with Job(None, "optimize_indices", uri) as job:
        built = FTS_BUILDER.build(job, req)
    meta = table_pb2.IndexMetadata(name=model.name, fields=list(model.fields), dataset_version=ds.version,
                                   index_version=built.index_version, created_at=int(time.time() * 1000),
                                   fragment_bitmap=bytes(BitMap(fragment_ids).serialize()))
    meta.uuid.uuid = new_uuid
    meta.index_details.ParseFromString(built.details)
    for path, size in built.files:
        meta.files.add(path=path, size_bytes=size)
    # CreateIndex replaces entries of the same name: the segments that stay are listed again
    commit_transaction(ds.store, CreateIndex([model, meta], []), ds.version)
    return built
