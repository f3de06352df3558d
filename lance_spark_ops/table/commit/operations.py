"""Apply a transaction's operation to the previous manifest: the next ``Manifest`` and indices.

This is Lance's ``Transaction::build_manifest`` (``rust/lance/src/dataset/transaction.rs``)
with pylance 14's observed behaviour where the two differ. No I/O: the caller passes the
previous manifest and its indices (and, for Restore, the manifest restored).

Per operation (``F`` = the previous fragments, new fragment ids come from
``max_fragment_id + 1`` and are given only to fragments whose id is 0, as Lance does):

=================  ===========================================================================
Append             ``F`` + new fragments (ids assigned)
Overwrite          the new fragments only, new schema; ids continue after ``max_fragment_id``
                   (pylance 14; ``0`` for a new dataset); ``config_upsert_values`` merged; the
                   data storage version is the data files' (which must match a requested one)
Delete             ``F`` minus ``deleted_fragment_ids``, ``updated_fragments`` replace by id
Rewrite            each group's old fragments (all must exist, else CommitConflict) replaced by
                   its new fragments (ids assigned); under stable row ids the caller gives the
                   new fragments their (old) row ids; indices: see ``indices``
Merge              exactly the given fragments (every old fragment kept, same row counts) and
                   the new schema
DataReplacement    per fragment, the data file with the same fields and file version gets the
                   new path and size; otherwise the replaced fields become tombstones (-2) in
                   the files that held them and the new file is added (pylance 14)
Project            new schema; data files left with no field of it are dropped
ReserveFragments   ``max_fragment_id += num_fragments``
Restore            the restored manifest, renumbered
CreateIndex        fragments unchanged; indices named like a new one, and those in
                   ``removed_indices`` (by uuid), are replaced by the new ones (as Lance)
=================  ===========================================================================

Update, UpdateConfig, Clone and UpdateBases are recognised (conflict checks read them) but not
built here: UnsupportedError.

Then, for every operation: fragments sorted by id, data files whose fields are all tombstones
(-2) dropped, feature flags recomputed (deletion files -> 1, stable row ids -> 2, config -> 8,
base paths -> 16, a previous DISABLE_TRANSACTION_FILE kept), ``max_fragment_id`` raised to the
largest id (never lowered), ``writer_version`` = this library, timestamp = now. Under stable
row ids, fragments without row ids get ``Range(next_row_id, next_row_id + physical_rows)``
(a partial sequence is completed) and Append / Overwrite fragments get created-at and
last-updated-at sequences of one run ``(Range(0, physical_rows), new version)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from operator import attrgetter

import numpy as np

from lance_spark_ops._version import __version__
from lance_spark_ops.errors import (
    CommitConflict,
    IncompatibleTransaction,
    InvalidInputError,
    UnsupportedError,
)
from lance_spark_ops.file.schema import LanceSchema
from lance_spark_ops.table.commit.indices import (
    IndexMetadata,
    copy_indices,
    retain_relevant_indices,
    rewrite_indices,
)
from lance_spark_ops.table.format.feature_flags import (
    FLAG_DISABLE_TRANSACTION_FILE,
    FLAG_STABLE_ROW_IDS,
    compute_flags,
)
from lance_spark_ops.table.format.fragment import (
    TOMBSTONE_FIELD_ID,
    DataFile,
    DataFragment,
    ExternalFile,
    any_deletion_file,
    has_row_id_meta,
)
from lance_spark_ops.table.format.fragment_run import FragmentRun, fragment_ids
from lance_spark_ops.table.format.manifest import DataStorageFormat, Manifest, WriterVersion
from lance_spark_ops.table.format.rowids import (
    RangeSegment,
    RowDatasetVersionRun,
    RowDatasetVersionSequence,
    RowIdSequence,
)
from lance_spark_ops.table.format.transaction import (
    Append,
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Transaction,
)
from lance_spark_ops.table.rowids import decode_row_ids, encode_row_ids

WRITER_LIBRARY = "lance-spark-ops"
SUPPORTED_STORAGE_VERSIONS = ("0.1", "2.0", "2.1", "2.2")


def writer_version() -> WriterVersion:
    """What we record as ``Manifest.writer_version`` (pylance accepts any library name)."""
    return WriterVersion(WRITER_LIBRARY, __version__)


@dataclass
class BuildOptions:
    """Settings that do not come from the transaction."""

    stable_row_ids: bool = False  # only for a new dataset; an existing one keeps its setting
    data_storage_version: str | None = None  # new dataset / Overwrite; None = from files / previous
    timestamp_nanos: int | None = None  # None = now


@dataclass
class _State:
    fragments: list[DataFragment]
    indices: list[IndexMetadata]
    next_fragment_id: int
    next_row_id: int | None  # None = no stable row ids
    # the fragments as wire bytes instead of ``fragments`` (``_run_of``): operations that keep
    # the previous fragments' bytes work on it; None = on ``fragments``
    run: FragmentRun | None = None

    def objects(self) -> None:
        """Leave the wire bytes for fragment objects (an operation the run path does not take)."""
        if self.run is not None:
            self.fragments, self.run = self.run.build(), None


def build_manifest(previous: Manifest | None, indices: list[IndexMetadata], txn: Transaction,
                   transaction_file: str | None, options: BuildOptions | None = None,
                   restored: Manifest | None = None,
                   restored_indices: list[IndexMetadata] | None = None,
                   ) -> tuple[Manifest, list[IndexMetadata]]:
    """The manifest (``previous.version + 1``, or 1) that ``txn`` makes, and its indices."""
    options = options or BuildOptions()
    op = txn.operation
    version = previous.version + 1 if previous is not None else 1
    if isinstance(op, Restore):
        if restored is None:
            raise InvalidInputError("Restore needs the manifest of the version restored")
        return _restore(restored, restored_indices or [], version, transaction_file, txn, options)
    if previous is None and not isinstance(op, Overwrite):
        raise InvalidInputError(f"{type(op).__name__} needs an existing dataset; create one with Overwrite")
    stable = _stable_row_ids(previous, options)
    run = _run_of(previous, op, options)
    state = _State(
        fragments=list(previous.fragments) if previous is not None and run is None else [],
        indices=copy_indices(indices),
        next_fragment_id=_next_fragment_id(previous),
        next_row_id=(previous.next_row_id if previous is not None else 0) if stable else None,
        run=run,
    )
    schema = previous.schema if previous is not None else None
    apply = _APPLY.get(type(op))
    if apply is None:
        raise UnsupportedError(f"committing a {type(op).__name__} operation is not supported")
    schema = apply(op, state, schema, version) or schema
    if schema is None:
        raise InvalidInputError("a new dataset needs a schema (Overwrite.schema)")
    if state.run is not None:
        run = state.run.sorted_by_id()
        ids = run.columns.id
        manifest = _new_manifest(previous, schema, [], version, op, options,
                                 top=int(ids.max()) if len(ids) else None)
        manifest.set_fragment_run(run)
    else:
        frags = sorted(state.fragments, key=attrgetter("id"))
        frags = [_drop_tombstoned_files(f) for f in frags]
        manifest = _new_manifest(previous, schema, frags, version, op, options)
    manifest.tag = txn.tag
    manifest.transaction_file = transaction_file
    if state.next_row_id is not None:
        manifest.next_row_id = state.next_row_id
    _set_flags(manifest, stable, previous)
    if isinstance(op, ReserveFragments):
        manifest.max_fragment_id = (manifest.max_fragment_id or 0) + op.num_fragments
    return manifest, state.indices


# -- shared helpers ---------------------------------------------------------------------------
def _run_of(previous: Manifest | None, op: Operation, options: BuildOptions) -> FragmentRun | None:
    """The previous fragments as wire bytes when ``op`` keeps them as they are (a
    ReserveFragments or CreateIndex) or only removes some and adds new ones (a Rewrite not
    moving the dataset to another file version): a 100 000-fragment commit then builds no
    object per fragment."""
    if previous is None or not isinstance(op, (ReserveFragments, CreateIndex, Rewrite)):
        return None
    if isinstance(op, Rewrite) and options.data_storage_version not in (None, previous.data_storage_version):
        return None
    return previous.fragment_run()


def _stable_row_ids(previous: Manifest | None, options: BuildOptions) -> bool:
    if previous is None:
        return options.stable_row_ids
    has = bool(previous.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    if options.stable_row_ids and not has:
        raise InvalidInputError("cannot enable stable row ids on an existing dataset")
    return has


def _next_fragment_id(previous: Manifest | None) -> int:
    if previous is None:
        return 0
    top = previous.fragment_max_id()
    return 0 if top is None else top + 1


def _assign_ids(frags: list[DataFragment], state: _State) -> list[DataFragment]:
    out = []
    for f in frags:
        f = replace(f)
        if f.id == 0:
            f.id = state.next_fragment_id
            state.next_fragment_id += 1
        out.append(f)
    return out


def _check_files(frags: list[DataFragment], what: str) -> None:
    for f in frags:
        for d in f.files:
            if not d.fields:
                raise InvalidInputError(f"{what}: data file {d.path!r} of fragment {f.id} holds no field")
        if f.physical_rows is None:
            raise InvalidInputError(f"{what}: fragment {f.id} does not record physical_rows")


def _assign_row_ids(frags: list[DataFragment], state: _State) -> None:
    """Give row ids to fragments without (or with too few), as Lance's ``assign_row_ids``."""
    if state.next_row_id is None:
        return
    for f in frags:
        n = int(f.physical_rows or 0)
        if isinstance(f.row_id_meta, ExternalFile):
            continue
        have = 0
        existing = None
        if f.row_id_meta is not None:
            existing = decode_row_ids(RowIdSequence.from_bytes(f.row_id_meta))
            have = len(existing)
        if have > n:
            raise InvalidInputError(f"fragment {f.id} has {have} row ids for {n} physical rows")
        if have == n and f.row_id_meta is not None:
            continue
        start = state.next_row_id
        if existing is None:
            seq = RowIdSequence([RangeSegment(start, start + n)])
        else:
            fill = np.arange(start, start + n - have, dtype=np.uint64)
            seq = encode_row_ids(np.concatenate([existing, fill]))
        f.row_id_meta = seq.to_bytes()
        state.next_row_id = start + n - have


def _version_meta(f: DataFragment, version: int) -> None:
    n = int(f.physical_rows or 0)
    if n <= 0:
        return
    meta = RowDatasetVersionSequence([RowDatasetVersionRun(RangeSegment(0, n), version)]).to_bytes()
    f.created_at_version_meta = meta
    f.last_updated_at_version_meta = meta


def _new_fragments(frags: list[DataFragment], state: _State, version: int, what: str) -> list[DataFragment]:
    _check_files(frags, what)
    out = _assign_ids(frags, state)
    if state.next_row_id is not None:
        _assign_row_ids(out, state)
        for f in out:
            _version_meta(f, version)
    return out


def _drop_tombstoned_files(f: DataFragment) -> DataFragment:
    if not f.is_decoded:
        return f  # carried over unchanged from the previous version
    if all(any(i != TOMBSTONE_FIELD_ID for i in d.fields) for d in f.files):
        return f
    return replace(f, files=[d for d in f.files if any(i != TOMBSTONE_FIELD_ID for i in d.fields)])


def _field_ids(schema: LanceSchema) -> set[int]:
    return {f.id for f in schema.walk()}


# -- per operation ------------------------------------------------------------------------------
def _append(op: Append, s: _State, schema: LanceSchema | None, version: int) -> None:
    s.fragments.extend(_new_fragments(op.fragments, s, version, "Append"))


def _overwrite(op: Overwrite, s: _State, schema: LanceSchema | None, version: int) -> LanceSchema:
    if op.schema is None:
        raise InvalidInputError("Overwrite needs a schema")
    if op.initial_bases and version > 1:
        raise InvalidInputError("Overwrite of an existing dataset cannot register base paths")
    s.fragments = _new_fragments(op.fragments, s, version, "Overwrite")
    s.indices = []
    return op.schema


def _delete(op: Delete, s: _State, schema: LanceSchema | None, version: int) -> None:
    gone = set(op.deleted_fragment_ids)
    updated = {f.id: f for f in op.updated_fragments}
    s.fragments = [updated.get(f.id, f) for f in s.fragments if f.id not in gone]
    fields = _field_ids(schema) if schema is not None else set()
    s.indices = retain_relevant_indices(s.indices, fields, (f.id for f in s.fragments))


def _rewrite_new(g: RewriteGroup, s: _State) -> list[DataFragment]:
    """A group's new fragments with their ids, checked."""
    new = _assign_ids(g.new_fragments, s)
    _check_files(new, "Rewrite")
    if s.next_row_id is not None:
        lacking = [f.id for f in new if f.row_id_meta is None]
        if lacking:
            raise InvalidInputError(f"Rewrite under stable row ids: new fragment(s) {lacking} carry "
                                    "no row ids (give them the row ids of the rows they hold)")
    return new


def _rewrite_run(op: Rewrite, s: _State) -> list[RewriteGroup] | None:
    """``_rewrite`` on the wire bytes: the old fragments dropped by position (one numpy pass),
    the new ones appended; None (nothing changed) when the groups are not simply present,
    distinct old fragments or a new fragment holds something the walk does not read - the
    object path then decides, with its precise errors."""
    assert s.run is not None
    groups = op.all_groups()
    if any(not g.old_fragments for g in groups):
        return None
    old = np.concatenate([fragment_ids(g.old_fragments) for g in groups])
    ids = s.run.columns.id
    if not (_distinct(old) and _distinct(ids) and np.isin(old, ids).all()):
        return None
    start = s.next_fragment_id
    assigned = [RewriteGroup(g.old_fragments, _rewrite_new(g, s)) for g in groups]
    extra = FragmentRun.of_fragments([_drop_tombstoned_files(f) for g in assigned for f in g.new_fragments])
    if extra is None:
        s.next_fragment_id = start
        return None
    s.run = s.run.take(np.flatnonzero(~np.isin(ids, old))).concat(extra)
    return assigned


def _distinct(ids: np.ndarray) -> bool:
    if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):  # a manifest's ids are ascending
        return True
    ids = np.sort(ids)
    return bool((ids[1:] != ids[:-1]).all())


def _rewrite(op: Rewrite, s: _State, schema: LanceSchema | None, version: int) -> None:
    assigned = _rewrite_run(op, s) if s.run is not None else None
    if assigned is not None:
        s.indices = rewrite_indices(s.indices, assigned, op.rewritten_indices, s.next_row_id is not None,
                                    op.uncovered_indices, op.frag_reuse_index, op.frag_reuse_replaces,
                                    op.rewritten_bitmaps)
        return
    s.objects()
    groups = op.all_groups()
    position = {f.id: i for i, f in enumerate(s.fragments)}
    replaced: dict[int, list[DataFragment]] = {}
    dropped: set[int] = set()
    assigned = []
    for g in groups:
        if not g.old_fragments:
            raise InvalidInputError("a rewrite group has no old fragments")
        missing = [f.id for f in g.old_fragments if f.id not in position or f.id in dropped]
        if missing:
            raise CommitConflict(f"Rewrite replaces fragment(s) {missing}, which the dataset no longer holds")
        new = _rewrite_new(g, s)
        dropped.update(f.id for f in g.old_fragments)
        replaced[g.old_fragments[0].id] = new
        assigned.append(RewriteGroup(g.old_fragments, new))
    out: list[DataFragment] = []
    for f in s.fragments:
        if f.id in replaced:
            out.extend(replaced[f.id])
        elif f.id not in dropped:
            out.append(f)
    s.fragments = out
    s.indices = rewrite_indices(s.indices, assigned, op.rewritten_indices, s.next_row_id is not None,
                                op.uncovered_indices, op.frag_reuse_index, op.frag_reuse_replaces,
                                op.rewritten_bitmaps)


def _merge(op: Merge, s: _State, schema: LanceSchema | None, version: int) -> LanceSchema:
    if op.schema is None:
        raise InvalidInputError("Merge needs a schema")
    new = {f.id: f for f in op.fragments}
    for old in s.fragments:
        if old.id not in new:
            raise InvalidInputError(f"Merge drops fragment {old.id}: a merge must keep every fragment")
        if old.physical_rows is not None and old.physical_rows != new[old.id].physical_rows:
            # (an old manifest without the count: the merge records it)
            raise InvalidInputError(f"Merge changes the row count of fragment {old.id} "
                                    f"({old.physical_rows} -> {new[old.id].physical_rows})")
    _check_files(op.fragments, "Merge")
    s.fragments = list(op.fragments)
    s.indices = retain_relevant_indices(s.indices, _field_ids(op.schema), new)
    return op.schema


def _project(op: Project, s: _State, schema: LanceSchema | None, version: int) -> LanceSchema:
    if op.schema is None:
        raise InvalidInputError("Project needs a schema")
    keep = _field_ids(op.schema)
    s.fragments = [replace(f, files=[d for d in f.files if any(i in keep for i in d.fields)])
                   for f in s.fragments]
    s.indices = retain_relevant_indices(s.indices, keep, (f.id for f in s.fragments))
    return op.schema


def _data_replacement(op: DataReplacement, s: _State, schema: LanceSchema | None, version: int) -> None:
    if len({tuple(r.new_file.fields) for r in op.replacements}) > 1:
        raise InvalidInputError("DataReplacement: all new data files must hold the same fields")
    by_id = {f.id: i for i, f in enumerate(s.fragments)}
    for r in op.replacements:
        if r.fragment_id not in by_id:
            raise CommitConflict(f"DataReplacement: fragment {r.fragment_id} is not in the dataset")
        i = by_id[r.fragment_id]
        s.fragments[i] = _replace_file(s.fragments[i], r.new_file)


def _replace_file(frag: DataFragment, new_file: DataFile) -> DataFragment:
    """pylance 14: a file holding exactly the new file's fields (same file version) gets its
    path and size; fields of it held by other files become tombstones there (-2) and the new
    file is added; fields held nowhere get the new file added."""
    files: list[DataFile] = []
    replaced = False
    new_fields = set(new_file.fields)
    for d in frag.files:
        if (d.fields == new_file.fields and d.file_major_version == new_file.file_major_version
                and d.file_minor_version == new_file.file_minor_version and not replaced):
            d = replace(d, path=new_file.path, file_size_bytes=new_file.file_size_bytes)
            replaced = True
        elif new_fields.intersection(d.fields):
            d = replace(d, fields=[TOMBSTONE_FIELD_ID if i in new_fields else i for i in d.fields])
        files.append(d)
    if not replaced:
        files.append(replace(new_file))
    return replace(frag, files=files)


def _reserve(op: ReserveFragments, s: _State, schema: LanceSchema | None, version: int) -> None:
    return None


def _create_index(op: CreateIndex, s: _State, schema: LanceSchema | None, version: int) -> None:
    names = {i.name for i in op.new_indices}
    gone = {bytes(i.uuid.uuid) for i in op.removed_indices}
    s.indices = [i for i in s.indices if i.name not in names and bytes(i.uuid.uuid) not in gone]
    s.indices.extend(copy_indices(op.new_indices))


_APPLY = {Append: _append, Overwrite: _overwrite, Delete: _delete, Rewrite: _rewrite, Merge: _merge,
          Project: _project, DataReplacement: _data_replacement, ReserveFragments: _reserve,
          CreateIndex: _create_index}


# -- the manifest itself --------------------------------------------------------------------------
def _storage_format(previous: Manifest | None, frags: list[DataFragment], op: Operation,
                    requested: str | None) -> DataStorageFormat:
    if requested is not None and requested not in SUPPORTED_STORAGE_VERSIONS:
        raise UnsupportedError(f"data storage version {requested!r} is not supported "
                               f"(use one of {', '.join(SUPPORTED_STORAGE_VERSIONS)})")
    if previous is not None and isinstance(op, Rewrite) and requested is not None \
            and requested != previous.data_storage_version:
        # a whole-dataset rewrite moving to another file version (legacy -> 2.x migration)
        found = {"0.1" if d.is_legacy else d.file_version for f in frags for d in f.files}
        if found - {requested}:
            raise IncompatibleTransaction(f"moving the dataset to {requested} files, but the version would "
                                          f"still hold {sorted(found - {requested})} files (pylance reads no "
                                          "dataset mixing file versions)")
        return DataStorageFormat("lance", requested)
    if previous is not None and not isinstance(op, Overwrite):
        return previous.data_storage_format
    found = {"0.1" if d.is_legacy else d.file_version for f in frags for d in f.files}
    if previous is not None and not found:  # an Overwrite with no data keeps the version
        return DataStorageFormat("lance", requested) if requested else previous.data_storage_format
    if len(found) > 1:
        raise InvalidInputError(f"data files of several file versions {sorted(found)} in one Overwrite")
    if found:
        (v,) = found
        if requested is not None and requested != v:
            raise InvalidInputError(f"requested data storage version {requested} but the data files are {v}")
        return DataStorageFormat("lance", v)
    return DataStorageFormat("lance", requested or "2.2")


def _new_manifest(previous: Manifest | None, schema: LanceSchema, frags: list[DataFragment], version: int,
                  op: Operation, options: BuildOptions, top: int | None = None) -> Manifest:
    """``top``: the largest fragment id when the fragments are a run (``frags`` then empty)."""
    m = Manifest(
        schema=schema,
        fragments=frags,
        version=version,
        timestamp_nanos=options.timestamp_nanos or time.time_ns(),
        writer_version=writer_version(),
        data_storage_format=_storage_format(previous, frags, op, options.data_storage_version),
    )
    if previous is not None:
        m.max_fragment_id = previous.max_fragment_id
        m.next_row_id = previous.next_row_id
        m.config = dict(previous.config)
        m.table_metadata = dict(previous.table_metadata)
        m.branch = previous.branch
        m.base_paths = list(previous.base_paths)
    if isinstance(op, Overwrite):
        m.config.update(op.config_upsert_values)
        if previous is None:
            m.base_paths = list(op.initial_bases)
    if frags:
        top = max(f.id for f in frags)
    if top is not None:
        if m.max_fragment_id is None or top > m.max_fragment_id:
            m.max_fragment_id = top
    return m


def _set_flags(m: Manifest, stable: bool, previous: Manifest | None) -> None:
    run = m.fragment_run()
    if stable:
        if run is not None:
            lacking = run.columns.id[~run.columns.has_row_ids].tolist()
        else:
            lacking = [f.id for f in m.fragments if not has_row_id_meta(f)]
        if lacking:
            raise InvalidInputError(f"the dataset uses stable row ids but fragment(s) {lacking[:10]} "
                                    "carry none")
    prev_flags = previous.writer_feature_flags if previous is not None else 0
    keep_disable = bool(prev_flags & FLAG_DISABLE_TRANSACTION_FILE)
    m.reader_feature_flags, m.writer_feature_flags = compute_flags(
        has_deletion_files=(bool(run.columns.has_deletion.any()) if run is not None
                            else any_deletion_file(m.fragments)),
        stable_row_ids=stable,
        has_config=bool(m.config),
        has_base_paths=bool(m.base_paths),
        disable_transaction_file=keep_disable,
    )


def _restore(restored: Manifest, indices: list[IndexMetadata], version: int, transaction_file: str | None,
             txn: Transaction, options: BuildOptions) -> tuple[Manifest, list[IndexMetadata]]:
    m = replace(restored, fragments=list(restored.fragments), config=dict(restored.config),
                table_metadata=dict(restored.table_metadata), unknown_fields=b"")
    m.version = version
    m.timestamp_nanos = options.timestamp_nanos or time.time_ns()
    m.transaction_file = transaction_file
    m.tag = txn.tag
    return m, copy_indices(indices)
