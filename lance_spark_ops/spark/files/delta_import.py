"""``import_delta``: a Delta Lake table's current snapshot as a Lance dataset version.

The driver reads the Delta log with ``deltalake`` (delta-rs; extra ``[delta]``): the live
Parquet files (add actions), their partition values, deletion vectors (as row offsets to
drop) and the column mapping (logical -> physical names). Executors convert the files
(``spark.files.delta_import_tasks``); the driver commits one Append (``mode="append"``) or
Overwrite (``create``: a new dataset; ``overwrite``). Runs on the job scaffold
(``spark.runtime.job``): phases ``plan`` -> ``convert`` -> ``commit``, timed into
``ImportMetrics.seconds``; when anything fails, every file of the job that the latest version
does not hold is deleted (never after ``CommitStateUnknown``), and after the commit the files
of retried or speculative attempts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import (
    InvalidInputError,
    NotFoundError,
    SchemaError,
    UnsupportedError,
)
from lance_spark_ops.file.schema import schema_from_arrow
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.files.delta_import_tasks import DeltaFile, ImportResult, ImportSpec, run_import
from lance_spark_ops.spark.runtime.job import Job, latest_data_files, referenced_data_files
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Append, Overwrite
from lance_spark_ops.table.write import storage_version

__all__ = ["DeltaSnapshot", "ImportMetrics", "import_delta", "read_delta_snapshot"]

MODES = ("create", "append", "overwrite")
VERSIONS = ("2.0", "2.1", "2.2")
DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
# reader features we handle; any other one could change what the files mean
_KNOWN_READER_FEATURES = {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                          "vacuumProtocolCheck",
                          "typeWidening", "typeWidening-preview", "variantType", "variantType-preview"}


@dataclass
class DeltaSnapshot:
    """What the driver learnt from the Delta log."""

    uri: str
    version: int
    schema: pa.Schema
    files: list[DeltaFile]
    physical_names: dict[str, str]
    nested_names: dict[str, dict[str, Any]]


@dataclass
class ImportMetrics:
    delta_uri: str
    lance_uri: str
    mode: str
    delta_version: int = -1
    delta_files: int = 0
    rows: int = 0
    lance_files: int = 0
    tasks: int = 0
    new_version: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)


def _mapping(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """logical name -> (physical name, nested mapping) from Delta's JSON schema."""
    out: dict[str, Any] = {}
    for f in fields:
        physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
        typ = f.get("type")
        nested = _mapping(typ["fields"]) if isinstance(typ, dict) and typ.get("type") == "struct" else {}
        out[f["name"]] = (physical, nested)
    return out


def _strip_delta_metadata(f: pa.Field) -> pa.Field:
    """``f`` without Delta's field metadata (``delta.columnMapping.*``: meaningless in Lance)."""
    typ = f.type
    if pa.types.is_struct(typ):
        typ = pa.struct([_strip_delta_metadata(c) for c in typ])
    meta = {k: v for k, v in (f.metadata or {}).items() if not k.startswith(b"delta.")}
    return pa.field(f.name, typ, f.nullable, meta or None)


def _variant_columns(fields: list[dict[str, Any]], prefix: str = "") -> list[str]:
    """Names of columns of Delta's ``variant`` type (anywhere in the tree)."""
    out = []
    for f in fields:
        typ, name = f.get("type"), prefix + f["name"]
        while isinstance(typ, dict) and typ.get("type") in ("array", "map"):
            typ = typ.get("elementType") or typ.get("valueType")
        if typ == "variant":
            out.append(name)
        elif isinstance(typ, dict) and typ.get("type") == "struct":
            out += _variant_columns(typ["fields"], f"{name}.")
    return out


def _deleted_rows(dt: Any) -> dict[str, np.ndarray]:
    """File URI -> row offsets its deletion vector removes (empty when the table has none)."""
    try:
        reader = dt.deletion_vectors()
    except Exception as e:  # noqa: BLE001 - a reader that cannot apply them must refuse the table
        raise UnsupportedError(f"cannot read the table's deletion vectors ({type(e).__name__}: {e})",
                               path=dt.table_uri) from None
    out: dict[str, np.ndarray] = {}
    for row in pa.table(reader).to_pylist():
        keep = np.asarray(row["selection_vector"], dtype=bool)
        out[unquote(row["filepath"])] = np.flatnonzero(~keep).astype(np.int64)
    return out


def _file_uri(table_uri: str, path: str) -> str:
    """The file's URI: log paths are URL-encoded (a partition directory ``k=c%2Fd`` is logged
    as ``k=c%252Fd``) and relative to the table unless absolute."""
    if "://" not in path and not path.startswith("/"):
        path = f"{table_uri.rstrip('/')}/{path}"
    return unquote(path)


def read_delta_snapshot(delta_uri: str, storage_options: Mapping[str, Any] | None = None,
                        version: int | None = None) -> DeltaSnapshot:
    """The live files, schema and deletion vectors of a Delta table version (default: latest)."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
    except ImportError:
        raise UnsupportedError("import_delta needs deltalake; pip install lance-spark-ops[delta]") from None
    try:
        dt = DeltaTable(delta_uri, version=version, storage_options=dict(storage_options or {}) or None)
    except TableNotFoundError:
        raise NotFoundError("no Delta table here", path=delta_uri) from None
    unknown = set(dt.protocol().reader_features or []) - _KNOWN_READER_FEATURES
    if unknown:
        raise UnsupportedError(f"Delta reader features {sorted(unknown)} are not supported", path=delta_uri)
    fields = json.loads(dt.schema().to_json())["fields"]
    variants = _variant_columns(fields)
    if variants:
        raise UnsupportedError(f"variant columns {variants} cannot be imported", path=delta_uri)
    schema = pa.schema([_strip_delta_metadata(f) for f in pa.schema(dt.schema().to_arrow())])
    mapping = _mapping(fields)
    deleted = _deleted_rows(dt)
    actions = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    table_uri = dt.table_uri
    files = []
    for a in actions:
        uri = _file_uri(table_uri, a["path"])
        partition = dict(a.get("partition") or {})
        files.append(DeltaFile(uri, a.get("num_records"), partition, deleted.pop(uri, None)))
    if deleted:
        raise UnsupportedError(f"deletion vectors of files not in the snapshot: {sorted(deleted)[:3]}",
                               path=delta_uri)
    return DeltaSnapshot(table_uri, dt.version(), schema, files,
                         {k: v[0] for k, v in mapping.items()},
                         {k: v[1] for k, v in mapping.items() if v[1]})


def _existing(uri: str, storage_options: Mapping[str, Any] | None, manifest_store: Any) -> Dataset | None:
    try:
        return Dataset.open(uri, storage_options=dict(storage_options or {}), manifest_store=manifest_store)
    except NotFoundError:
        return None


def _target(snap: DeltaSnapshot, existing: Dataset | None, mode: str,
            data_storage_version: str | None) -> tuple[Any, str]:
    """(Lance schema, file version) of the version to commit."""
    if mode == "append" and existing is not None:
        version = storage_version(data_storage_version, existing, mode)
        want = existing.schema
        if want.names != snap.schema.names:
            raise SchemaError(f"Delta columns {snap.schema.names} differ from the dataset's {want.names}",
                              path=existing.uri)
        return existing.lance_schema, version
    version = storage_version(data_storage_version, None, mode)
    if version not in VERSIONS:  # the conversion task writes 2.x files only
        raise UnsupportedError(f"import_delta writes data storage versions {', '.join(VERSIONS)}, not "
                               f"{data_storage_version!r}")
    return schema_from_arrow(snap.schema), version


def _groups(files: list[DeltaFile], rows_per_task: int) -> list[list[DeltaFile]]:
    """Neighbouring files packed into tasks of about ``rows_per_task`` rows."""
    groups: list[list[DeltaFile]] = []
    rows = 0
    for f in files:
        if not groups or rows >= rows_per_task:
            groups.append([])
            rows = 0
        groups[-1].append(f)
        rows += f.num_records or rows_per_task
    return groups


def _specs(snap: DeltaSnapshot, lance_uri: str, schema: Any, version: str, max_rows_per_file: int,
           rows_per_task: int, so: dict[str, Any], dso: dict[str, Any]) -> list[ImportSpec]:
    """One task per group of neighbouring files."""
    return [ImportSpec(lance_uri, g, schema, snap.physical_names, snap.nested_names, version,
                       max_rows_per_file, so, dso) for g in _groups(snap.files, rows_per_task)]


def import_delta(spark: Any, delta_uri: str, lance_uri: str, mode: str = "create", *,
                 storage_options: dict[str, Any] | None = None, tuning: Tuning | None = None,
                 delta_storage_options: dict[str, Any] | None = None,
                 data_storage_version: str | None = None, delta_version: int | None = None,
                 max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE, rows_per_task: int = 4 * 1024 * 1024,
                 manifest_store: Any = None) -> ImportMetrics:
    """Import the Delta table at ``delta_uri`` into the Lance dataset at ``lance_uri``.

    ``mode``: ``create`` (fails if the dataset exists), ``append`` (creates it when absent) or
    ``overwrite``. ``storage_options`` are the Lance side's (pylance's names);
    ``delta_storage_options`` default to them. ``spark=None`` converts in this process.
    """
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
    if max_rows_per_file <= 0 or rows_per_task <= 0:
        raise InvalidInputError("max_rows_per_file and rows_per_task must be positive")
    so = dict(storage_options or {})
    dso = dict(delta_storage_options if delta_storage_options is not None else so)
    metrics = ImportMetrics(delta_uri, lance_uri, mode)
    with Job(spark, "import_delta", lance_uri, metrics, tuning) as job:
        with job.phase("plan"):
            snap = read_delta_snapshot(delta_uri, dso, delta_version)
            existing = _existing(lance_uri, so, manifest_store)
            if mode == "create" and existing is not None:
                raise InvalidInputError("a dataset already exists here; use mode='append' or 'overwrite'",
                                        path=lance_uri)
            schema, version = _target(snap, existing, mode, data_storage_version)
            specs = _specs(snap, lance_uri, schema, version, max_rows_per_file, rows_per_task, so, dso)
            metrics.delta_version, metrics.delta_files = snap.version, len(snap.files)
            metrics.tasks = len(specs)
        store = ObjectStore(lance_uri, so)
        with job.cleanup_on_failure(store, lambda: latest_data_files(store, manifest_store)):
            with job.phase("convert", tasks=len(specs), detail=f"from {delta_uri}") as ph:
                results: list[ImportResult] = job.run_tasks(specs, run_import)
                ph.add(rows=sum(r.rows for r in results))
            frags = [f for r in results for f in r.fragments]
            op = Append(frags) if mode == "append" and existing is not None else Overwrite(frags, schema)
            with job.phase("commit"):
                job.before_commit(1)
                ds = Dataset.from_commit(commit_transaction(
                    store, op, existing.version if existing is not None else 0, manifest_store=manifest_store,
                    must_create=mode == "create",
                    data_storage_version=version if isinstance(op, Overwrite) else None))
        job.delete_other_attempts(store, referenced_data_files(ds))
    metrics.rows = sum(r.rows for r in results)
    metrics.lance_files = len(frags)
    metrics.new_version = ds.version
    return metrics
