"""Writing side of the ``lance`` data source: executors write data files, the driver commits.

``LanceWriter`` is built on the driver (it opens the dataset once: read version, schema, file
version) and pickled to every task. A task converts Spark's Arrow batches to the dataset's
types, writes data files with our ``LanceFileWriter`` (``table.write.write_fragments``) and
returns the new fragments as a small ``LanceCommitMessage``; a task that fails deletes its own
files. ``commit`` commits one ``Append`` (existing dataset, append mode) or ``Overwrite``
(overwrite mode, or no dataset yet: a new one is created, as pylance does) under the conflict
rules of ``table.commit``; when the commit surely failed its files are deleted, after
``CommitStateUnknown`` they are kept. ``abort`` deletes the files of the messages unless a
version committed since the read version refers to them (a commit whose answer was lost).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from lance_spark_ops.errors import CommitStateUnknown, NotFoundError
from lance_spark_ops.file.schema import LanceSchema, schema_from_arrow
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.datasource.options import WriteOptions
from lance_spark_ops.spark.runtime.spark_types import lance_schema_of_spark
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.transaction import Append, Overwrite
from lance_spark_ops.table.write import conform_batch, storage_version, write_fragments


@dataclass
class LanceCommitMessage(WriterCommitMessage):
    """Fragments one task wrote (ids unassigned) and the relative paths of their files."""

    fragments: list[DataFragment] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


class LanceWriter(DataSourceArrowWriter):
    """One Spark write of a DataFrame into a Lance dataset (append or overwrite)."""

    def __init__(self, opts: WriteOptions, spark_schema: Any, overwrite: bool) -> None:
        self.opts = opts
        store = ObjectStore(opts.uri, opts.storage_options)
        try:
            existing: Dataset | None = Dataset.open(store)
        except NotFoundError:
            existing = None
        if existing is not None:
            existing.check_writable()
        self.append = existing is not None and not overwrite
        mode = "append" if self.append else "overwrite"
        self.file_version = storage_version(opts.data_storage_version, existing, mode)
        self.read_version = existing.version if existing is not None else 0
        self.new_dataset = existing is None
        if self.append:
            self.schema: LanceSchema = existing.lance_schema  # type: ignore[union-attr]
        else:
            self.schema = schema_from_arrow(lance_schema_of_spark(spark_schema))

    def _store(self) -> ObjectStore:
        return ObjectStore(self.opts.uri, self.opts.storage_options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        store = self._store()
        target = self.schema.to_arrow()
        where = store.uri("")
        written: list[str] = []
        batches = (conform_batch(b, target, where, cast=True, source="the DataFrame")
                   for b in iterator if b.num_rows)
        try:
            frags = write_fragments(store, batches, self.schema, self.file_version,
                                    self.opts.max_rows_per_file, written)
        except BaseException:
            store.delete_many(written)
            raise
        return LanceCommitMessage(frags, written)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        frags, paths = _gather(messages)
        store = self._store()
        op: Append | Overwrite = Append(frags) if self.append else Overwrite(frags, self.schema)
        try:
            commit_transaction(store, op, self.read_version,
                               enable_stable_row_ids=self.opts.enable_stable_row_ids and self.new_dataset,
                               data_storage_version=None if self.append else self.file_version)
        except CommitStateUnknown:
            raise
        except Exception:  # surely not committed
            store.delete_many(paths)
            raise

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _, paths = _gather(messages)
        if not paths:
            return
        store = self._store()
        try:
            landed = _referenced_since(store, self.read_version, paths)
        except Exception:  # cannot tell whether a commit landed: keep the files
            return
        if not landed:
            store.delete_many(paths)


def _gather(messages: Sequence[WriterCommitMessage | None]) -> tuple[list[DataFragment], list[str]]:
    frags: list[DataFragment] = []
    paths: list[str] = []
    for m in messages:
        if isinstance(m, LanceCommitMessage):
            frags.extend(m.fragments)
            paths.extend(m.paths)
    return frags, paths


def _referenced_since(store: ObjectStore, read_version: int, paths: Sequence[str]) -> bool:
    """Whether a version after ``read_version`` holds one of the data files ``paths``."""
    names = {p.rsplit("/", 1)[-1] for p in paths}
    try:
        latest = Dataset.open(store)
    except NotFoundError:
        return False
    for v in latest.versions():
        if v <= read_version:
            continue
        ds = latest if v == latest.version else latest.checkout(v)
        if any(df.path in names for f in ds.fragments for df in f.files):
            return True
    return False
