"""Executor side of ``import_delta``: Parquet files of a Delta snapshot -> Lance data files.

Each task gets a few ``DeltaFile``s (planned on the driver from the Delta log) and writes
their live rows as Lance files under ``data/``, named with the attempt's prefix (so the driver
can delete a failed or duplicate attempt's files). Per Parquet file: physical column names
(column mapping) become logical ones, columns added to the table after the file was written
become nulls, partition values become constant columns, rows a deletion vector marks are
dropped, and the batch is cast to the target schema. Returns the new fragments (ids unset).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lance_spark_ops.errors import CorruptFileError, LanceError, NotFoundError, SchemaError
from lance_spark_ops.file.schema import LanceSchema
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.format.fragment import DataFile, DataFragment
from lance_spark_ops.table.paths import DATA_DIR
from lance_spark_ops.table.scan import column_owners

READ_BATCH_ROWS = 64 * 1024


@dataclass
class DeltaFile:
    """One live Parquet file of the snapshot."""

    uri: str
    num_records: int | None
    partition_values: dict[str, Any] = field(default_factory=dict)  # logical name -> typed value
    deleted_rows: np.ndarray | None = None  # row offsets a deletion vector removes


@dataclass
class ImportSpec:
    """One task: convert ``files`` into Lance files of ``lance_uri``."""

    lance_uri: str
    files: list[DeltaFile]
    schema: LanceSchema  # the target dataset's schema (field ids)
    physical_names: dict[str, str]  # logical top-level name -> name in the Parquet files
    nested_names: dict[str, dict[str, Any]]  # logical name -> renames inside a struct (see _rename)
    version: str  # Lance file version
    max_rows_per_file: int
    # secrets: kept out of reprs (task errors and logs print specs)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    delta_storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ImportResult:
    fragments: list[DataFragment]
    rows: int
    files_read: int
    written: list[str]


def _rename(arr: pa.Array, target: pa.DataType, names: dict[str, Any]) -> pa.Array:
    """Struct children from physical to logical names (``names``: logical -> (physical, nested))."""
    if not pa.types.is_struct(target) or not pa.types.is_struct(arr.type):
        return arr
    children = {arr.type.field(i).name: arr.field(i) for i in range(arr.type.num_fields)}
    cols = []
    for f in target:
        physical, nested = names.get(f.name, (f.name, {}))
        child = children.get(physical)
        cols.append(pa.nulls(len(arr), f.type) if child is None else _rename(child, f.type, nested))
    return pa.StructArray.from_arrays(cols, fields=list(target), mask=arr.is_null())


def _live_batches(spec: ImportSpec, df: DeltaFile, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The file's rows in the target schema, deletion vector applied; a file that is not
    readable Parquet (pyarrow's ArrowInvalid, or its OSError without an errno: a page header
    that does not parse) is a CorruptFileError naming it, a failed read a LanceError."""
    try:
        yield from _read_live(spec, df, target)
    except LanceError:
        raise
    except FileNotFoundError:
        raise NotFoundError("the Delta log names a data file that does not exist", path=df.uri) from None
    except pa.ArrowException as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise LanceError(f"reading the Parquet file failed: {e}", path=df.uri) from e
        raise CorruptFileError(f"not a readable Parquet file: {e}", path=df.uri) from None
    except OSError as e:
        if e.errno is None:
            raise CorruptFileError(f"not a readable Parquet file: {e}", path=df.uri) from None
        raise LanceError(f"reading the Parquet file failed: {type(e).__name__}: {e}", path=df.uri) from e


def _read_live(spec: ImportSpec, df: DeltaFile, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    store, rel = ObjectStore.for_file(df.uri, spec.delta_storage_options)
    with store.fs.open(store.full_path(rel), "rb") as handle, pq.ParquetFile(handle) as pf:
        present = set(pf.schema_arrow.names)
        wanted = [spec.physical_names.get(f.name, f.name) for f in target]
        columns = [c for c in wanted if c in present]
        deleted = df.deleted_rows
        offset = 0
        for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=columns):
            n = batch.num_rows
            arrays = []
            for f, physical in zip(target, wanted, strict=True):
                if f.name in df.partition_values:
                    arrays.append(pa.array([df.partition_values[f.name]] * n, f.type))
                elif physical in present:
                    col = _rename(batch.column(physical), f.type, spec.nested_names.get(f.name, {}))
                    arrays.append(_cast(col, f, df.uri))
                else:
                    arrays.append(pa.nulls(n, f.type))
            out = pa.RecordBatch.from_arrays(arrays, schema=target)
            if deleted is not None and deleted.size:
                keep = np.ones(n, dtype=bool)
                local = deleted[(deleted >= offset) & (deleted < offset + n)] - offset
                keep[local] = False
                out = out.filter(pa.array(keep))
            offset += n
            if out.num_rows:
                yield out


def _cast(col: pa.Array, f: pa.Field, where: str) -> pa.Array:
    if col.type == f.type:
        return col
    try:
        return col.cast(f.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"column {f.name!r} is {col.type} in this file and cannot become {f.type}: {e}",
                          path=where) from None


def run_import(spec: ImportSpec, ctx: TaskContext) -> ImportResult:
    """Write the task's files as Lance files (at most ``max_rows_per_file`` rows each)."""
    store = ObjectStore(spec.lance_uri, spec.storage_options)
    target = spec.schema.to_arrow()
    owners = column_owners(spec.schema.fields, spec.version)
    major, minor = (int(x) for x in spec.version.split("."))
    frags: list[DataFragment] = []
    written: list[str] = []
    writer: LanceFileWriter | None = None
    name = ""
    rows = 0

    def close() -> None:
        n, size = writer.close()
        files = [DataFile(name, [o.id for o in owners], list(range(len(owners))), major, minor, size)]
        frags.append(DataFragment(0, files, physical_rows=n))

    for df in spec.files:
        for batch in _live_batches(spec, df, target):
            start = 0
            while start < batch.num_rows:
                if writer is None:
                    name = f"{ctx.file_prefix}-{len(written)}.lance"
                    written.append(f"{DATA_DIR}/{name}")
                    writer = LanceFileWriter(written[-1], target, version=spec.version, store=store,
                                             lance_schema=spec.schema)
                    in_file = 0
                take = min(batch.num_rows - start, spec.max_rows_per_file - in_file)
                writer.write(batch.slice(start, take))
                start += take
                in_file += take
                rows += take
                if in_file == spec.max_rows_per_file:
                    close()
                    writer = None
    if writer is not None:
        close()
    return ImportResult(frags, rows, len(spec.files), written)
