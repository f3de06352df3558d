"""Scan task: decode the fragments named by a descriptor batch, on the executor, into batches
in Spark's Arrow form (``spark.runtime.spark_types``).

The descriptor DataFrame holds one row per partition: ``(part, fragment_ids)``. The task opens
the dataset version it was planned on (cached per Python worker, so a reused worker parses the
manifest once; from the bytes the driver read when it shipped them, ``ship``) and streams each
fragment's live rows through ``Dataset.scan_fragment`` in physical order. Nothing but the small
descriptors (and small manifests) travels through Spark to the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from lance_spark_ops.cache import region
from lance_spark_ops.errors import IncompatibleTransaction
from lance_spark_ops.spark.runtime.spark_types import spark_target_schema, to_spark_batch
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS, Dataset

DESCRIPTOR_SCHEMA = "part long, fragment_ids array<long>"
_datasets = region("spark.scan_datasets", max_entries=4)
DATASET_BYTES = 16 << 20  # charged per opened version (its parsed manifest; a nominal size)
_shipped = region("spark.shipped_manifests", max_entries=8)


def _key(uri: str, version: int, storage_options: dict[str, Any] | None, timestamp: datetime | None) -> tuple:
    so_key = tuple(sorted((str(k), str(v)) for k, v in (storage_options or {}).items()))
    return (uri, version, so_key, timestamp)


@dataclass(frozen=True)
class ShippedManifest:
    """A version's manifest file as the driver read it (``path`` relative to the dataset), sent
    to the tasks in their closure: ``open_dataset`` parses it instead of reading it, one round
    trip fewer per task and worker on an object store. Only small files travel
    (``Dataset.manifest_bytes``)."""

    key: tuple = field(repr=False)  # ``open_dataset``'s cache key (its options hold secrets)
    path: str
    data: bytes = field(repr=False)


def ship(ds: Dataset) -> ShippedManifest | None:
    """``ds``'s manifest file for ``receive`` in the tasks' processes (None when it kept no bytes)."""
    if ds.manifest_bytes is None:
        return None
    return ShippedManifest(_key(ds.uri, ds.version, ds.store.storage_options, ds.timestamp),
                           ds.manifest_path, ds.manifest_bytes)


def receive(shipped: Iterable[ShippedManifest | None]) -> None:
    """Note manifests the driver shipped, for this process's next ``open_dataset`` of them
    (None entries: versions that kept no bytes, ``ship``)."""
    for s in shipped:
        if s is not None and _datasets.get(s.key) is None and _shipped.get(s.key) is None:
            _shipped.put(s.key, s, len(s.data))


@dataclass(frozen=True)
class ScanSpec:
    """What every scan task needs (pickled into the task closure, a few hundred bytes)."""

    uri: str
    version: int
    columns: tuple[str, ...] | None = None
    with_row_id: bool = False
    with_row_address: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # secrets: not in reprs
    timestamp: datetime | None = None  # of the version (see open_dataset)


def open_dataset(uri: str, version: int, storage_options: dict[str, Any] | None = None,
                 timestamp: datetime | None = None) -> Dataset:
    """``Dataset.open`` through the process's cache (manifests are immutable per version).

    ``timestamp``: the version's commit time as the driver planned on it. It is part of the
    cache key, so a dataset deleted and written again at the same URI (same version number,
    other content) is not served from a reused worker's cache; a version whose time differs
    on opening was replaced after planning, which is an error."""
    key = _key(uri, version, storage_options, timestamp)
    ds = _datasets.get(key)
    if ds is None:
        got = _shipped.get(key)
        ds = (Dataset.from_manifest_bytes(uri, got.data, got.path, version, storage_options=storage_options)
              if got is not None else Dataset.open(uri, version, storage_options=storage_options))
        if timestamp is not None and ds.timestamp != timestamp:
            raise IncompatibleTransaction(f"version {version} was committed at {ds.timestamp}, not at "
                                          f"{timestamp} as planned: the dataset was replaced", path=uri)
        _datasets.put(key, ds, DATASET_BYTES)
    return ds


def keep_open(ds: Dataset, uri: str, storage_options: dict[str, Any] | None = None) -> None:
    """Hand ``open_dataset`` a version this process holds open already (a driver running a small
    task itself: no second read of the manifest)."""
    _datasets.put(_key(uri, ds.version, storage_options, ds.timestamp), ds, DATASET_BYTES)


def scan_fragments(spec: ScanSpec, fragment_ids: Sequence[int]) -> Iterator[pa.RecordBatch]:
    """Live rows of the fragments, in order, as Lance Arrow batches (not yet converted)."""
    ds = open_dataset(spec.uri, spec.version, spec.storage_options, spec.timestamp)
    columns = list(spec.columns) if spec.columns is not None else None
    for fid in fragment_ids:
        yield from ds.scan_fragment(int(fid), columns, spec.with_row_id, spec.with_row_address,
                                    spec.batch_rows)


def lance_scan_schema(spec: ScanSpec) -> pa.Schema:
    ds = open_dataset(spec.uri, spec.version, spec.storage_options, spec.timestamp)
    columns = list(spec.columns) if spec.columns is not None else None
    return ds.output_schema(columns, spec.with_row_id, spec.with_row_address)


def make_scan_mapper(spec: ScanSpec, target: pa.Schema | None = None
                     ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: descriptor batches in, converted data batches out."""

    def mapper(descriptors: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out_schema = target if target is not None else spark_target_schema(lance_scan_schema(spec))
        for desc in descriptors:
            for ids in desc.column("fragment_ids").to_pylist():
                for batch in scan_fragments(spec, ids or []):
                    if batch.num_rows:
                        yield to_spark_batch(batch, out_schema)

    return mapper


def group_fragments(sizes: Sequence[tuple[int, int]], max_rows: int | None) -> list[list[int]]:
    """Neighbouring fragments ``(id, rows)`` packed into groups of at most ``max_rows`` rows
    (a bigger fragment is a group of its own); ``None``: one fragment per group."""
    if max_rows is None:
        return [[fid] for fid, _ in sizes]
    groups: list[list[int]] = []
    rows = 0
    for fid, n in sizes:
        if groups and rows + n <= max_rows:
            groups[-1].append(fid)
            rows += n
        else:
            groups.append([fid])
            rows = n
    return groups
