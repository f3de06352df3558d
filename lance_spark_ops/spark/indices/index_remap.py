"""Indices of a compaction: what happens to each index when fragments are rewritten (driver).

``compaction_index_changes`` turns a compaction's rewrite groups into the parts of its Rewrite
commit that concern indices (see ``lance_spark_ops.index.actions`` for the decisions):
rewritten index entries (files written by ``spark.indices.index_remap_tasks`` tasks), the fragment
reuse index extended by one version, and the indices that stop covering the rewritten
fragments. ``remap_indices`` rewrites every index still behind the fragment reuse index and
trims the versions no index needs any more.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_spark_ops._pb import transaction_pb2
from lance_spark_ops.errors import (
    CommitConflict,
    CommitStateUnknown,
    InvalidInputError,
    LanceError,
    NotFoundError,
    UnsupportedError,
)
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.actions import (
    IVF_KINDS,
    REMAPPABLE_KINDS,
    IndexActions,
    can_remap,
    effective_bitmap,
    plan_index_actions,
    stored_bitmap,
)
from lance_spark_ops.index.address_map import surviving_addresses
from lance_spark_ops.index.frag_reuse import INLINE_LIMIT, FragDigest, build_index, make_group
from lance_spark_ops.index.kinds import FRAG_REUSE_INDEX_NAME, index_kind, is_hnsw, uuid_str
from lance_spark_ops.index.vector.ivf import AUX_FILE, INDEX_FILE, PART_ID_COLUMN
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.commit.conflict import touched
from lance_spark_ops.table.commit.retry import retry_on_conflict
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.fragment_run import fragment_ids
from lance_spark_ops.table.format.transaction import Rewrite, RewriteGroup
from lance_spark_ops.table.fragment_batch import FragmentBatch
from lance_spark_ops.table.index_entries import (
    effective_bitmaps,
    frag_reuse_entry,
    index_entries,
    reuse_versions,
)

RewrittenIndex = transaction_pb2.Transaction.Rewrite.RewrittenIndex


def check_defer_allowed(ds: Dataset, defer: bool) -> None:
    if defer and ds.uses_stable_row_ids:
        # pylance 14: "Cannot compact with defer_index_remap: the dataset uses stable row IDs"
        raise UnsupportedError("defer_index_remap is not supported on a dataset with stable row ids "
                               "(pylance 14 refuses it too)", path=ds.uri)


@dataclass
class IndexChanges:
    """The index part of one Rewrite commit."""

    actions: IndexActions
    rewritten: list[Any] = field(default_factory=list)  # Transaction.Rewrite.RewrittenIndex
    frag_reuse_index: Any = None
    frag_reuse_replaces: bytes | None = None
    uncovered: list[bytes] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # written for this commit, relative to the dataset
    bases: dict[bytes, bytes] = field(default_factory=dict)  # rewritten index -> bitmap before


def compaction_index_changes(ds: Dataset, groups: list[RewriteGroup], defer: bool,
                             dataset_version: int, remap: Any = None,
                             inline_limit: int = INLINE_LIMIT) -> IndexChanges:
    """Decide and prepare the index changes of a Rewrite of ``groups`` (new fragments with
    their final ids) read at ``ds``; ``dataset_version`` is the version recorded in a new
    fragment reuse index version (pylance: the version after the id reservation).
    ``remap(ds, indices, groups) -> (rewritten, files)`` rewrites index files (None: none);
    ``inline_limit``: the reuse index's details over it go to their own file."""
    check_defer_allowed(ds, defer)
    versions = reuse_versions(ds)
    old_ids = np.concatenate([np.zeros(0, np.int64), *(fragment_ids(g.old_fragments) for g in groups)])
    remappable = REMAPPABLE_KINDS if remap is not None else frozenset()
    cols = ds.manifest.fragment_columns()  # from the manifest's bytes: no fragment object
    deleted = old_ids[np.isin(old_ids, cols.id[cols.has_deletion])].tolist()
    old_ids = old_ids.tolist()
    entries = index_entries(ds)
    acts = plan_index_actions(entries, old_ids, versions, ds.uses_stable_row_ids, defer, remappable,
                              deleted, vector_kinds(ds, entries), layout_readable(ds))
    _refuse_unreadable_reuse(ds, acts.reuse, deleted, versions)
    out = IndexChanges(acts, uncovered=[bytes(i.uuid.uuid) for i in acts.uncover])
    if acts.remap:
        reuse = tuple(v.SerializeToString() for v in versions)
        out.rewritten, out.files = remap(ds, acts.remap, groups, reuse)
        for idx in acts.remap:
            bm = effective_bitmap(idx, versions)
            out.bases[bytes(idx.uuid.uuid)] = bytes(BitMap(bm).serialize())
    if acts.reuse or (defer and not ds.uses_stable_row_ids):
        version = _reuse_version(ds, groups, dataset_version)
        new_frags = BitMap(f.id for g in groups for f in g.new_fragments)
        old = frag_reuse_entry(ds)
        meta, external = build_index(versions + [version], dataset_version, new_frags,
                                     old.index_version if old is not None else 0, inline_limit)
        if external is not None:
            from lance_spark_ops.index.frag_reuse import details_path

            ds.store.write(details_path(meta), external)
            out.files.append(details_path(meta))
        out.frag_reuse_index = meta
        out.frag_reuse_replaces = bytes(old.uuid.uuid) if old is not None else None
    return out


def _refuse_unreadable_reuse(ds: Dataset, reused: Sequence[Any], deleted: Sequence[int],
                                versions: Sequence[Any]) -> None:
    """UnsupportedError for an index of an old layout about to go behind the fragment reuse
    index where pylance 14 cannot read it through it: a full-text index of pylance <= 0.2x, or
    a vector index whose details do not name its sub-index (pylance <= 0.2x) that may be
    IVF_HNSW while fragments with deleted rows are rewritten (its graph keeps the deleted rows)."""
    gone = BitMap(deleted)
    for idx in reused:
        if index_kind(idx) == "INVERTED" and _legacy_fts(ds, idx):
            raise UnsupportedError(
                f"index {idx.name!r} ({uuid_str(idx.uuid.uuid)}): a full-text index in the layout of pylance "
                "<= 0.2x (docs / invert / tokens files, no metadata.lance) covers fragments that would be "
                "rewritten; pylance 14 cannot read such an index through the fragment reuse index (its "
                "answers lose the rewritten rows), and its own compaction fails on such an index (a panic in "
                "its FTS remap, pylance 14.0.2). Rebuild the index with pylance 14 first", path=ds.uri)
        if index_kind(idx) not in ("VECTOR", "UNKNOWN") or not idx.fields:
            continue
        try:
            dt = ds.lance_schema.field_by_id(idx.fields[0]).arrow_type()
        except (KeyError, LookupError):
            continue
        if not pa.types.is_fixed_size_list(dt):
            continue  # an old scalar index: remapped through the fragment reuse index as pylance does
        bm = effective_bitmap(idx, versions)
        if bm is not None and bm & gone and _may_be_hnsw(ds, idx):
            raise UnsupportedError(
                f"index {idx.name!r} ({uuid_str(idx.uuid.uuid)}): a vector index written by an old pylance "
                "(pylance <= 0.2x: no type in its details, files in a layout this library does not rewrite) "
                "that is or may be IVF_HNSW covers fragments with deleted rows that would be rewritten; "
                "behind the fragment reuse index pylance 14 cannot read an HNSW index then (nor can its own "
                "compaction rewrite HNSW of pylance <= 0.1x: it fails on 0.10's v1 file and cannot query "
                "0.16's). Rebuild the index (pylance create_index(..., replace=True)) or exclude those "
                "fragments", path=ds.uri)


def _index_file_type(ds: Dataset, idx: Any) -> tuple[str, str] | None:
    """(file version, ``lance:index`` type) of the index's ``index.idx`` when it is a Lance file
    (None: absent, elsewhere, or the v1 protobuf index file of pylance <= 0.9)."""
    if idx.HasField("base_id"):
        return None
    try:
        r = LanceFileReader(f"_indices/{uuid_str(idx.uuid.uuid)}/{INDEX_FILE}", store=ds.store)
        meta = json.loads((r.schema.metadata or {}).get(b"lance:index", b"{}"))
    except (LanceError, ValueError):
        return None
    return r.version, str(meta.get("type", "")).upper() if isinstance(meta, dict) else ""


def _storage_layout_known(ds: Dataset, idx: Any) -> bool:
    """``auxiliary.idx`` holds ``_rowid`` and one storage column (pylance 0.20 also stored
    ``__ivf_part_id`` between them: dropped when the file is rewritten, as pylance 14 does)."""
    try:
        names = LanceFileReader(f"_indices/{uuid_str(idx.uuid.uuid)}/{AUX_FILE}", store=ds.store).schema.names
    except LanceError:
        return False
    names = [n for n in names if n != PART_ID_COLUMN]
    return len(names) == 2 and names[0] == "_rowid"


def vector_kinds(ds: Dataset, indices: Sequence[Any]) -> dict[bytes, str]:
    """uuid -> type of each vector index whose details do not name its type (pylance <= 5 wrote
    empty VectorIndexDetails, <= 0.19 none) when its ``index.idx`` (a 2.x Lance file, the layout
    this library rewrites) says it is one of the IVF types it remaps; others are left out."""
    out: dict[bytes, str] = {}
    for idx in indices:
        if index_kind(idx) not in ("VECTOR", "UNKNOWN") or not idx.fields:
            continue
        found = _index_file_type(ds, idx)
        if found is not None and found[0] != "0.1" and found[1] in IVF_KINDS \
                and _storage_layout_known(ds, idx):
            out[bytes(idx.uuid.uuid)] = found[1]
    return out


def _legacy_fts(ds: Dataset, idx: Any) -> bool:
    """An INVERTED index written before pylance 0.3x's partitioned layout (no metadata.lance)."""
    if idx.HasField("base_id"):
        return True
    return not ds.store.exists(f"_indices/{uuid_str(idx.uuid.uuid)}/metadata.lance")


def _may_be_hnsw(ds: Dataset, idx: Any) -> bool:
    """Whether an index without a telling details message may be IVF_HNSW, from its
    ``index.idx``: a Lance file says its type in the schema metadata ``lance:index``; a v1
    protobuf index file (``[data][Index protobuf]`` and a 0.1 footer: pylance <= 0.9) holds
    IVF_PQ or DiskANN stages only. Anything else: maybe (refused)."""
    if idx.HasField("base_id"):
        return True
    rel = f"_indices/{uuid_str(idx.uuid.uuid)}/{INDEX_FILE}"
    try:
        meta = LanceFileReader(rel, store=ds.store).schema.metadata or {}
        return "HNSW" in str(json.loads(meta.get(b"lance:index", b"{}")).get("type", "HNSW")).upper()
    except (LanceError, ValueError):
        pass
    try:
        size = ds.store.size(rel)
        tail = ds.store.read_range(rel, size - 16, 16) if size >= 16 else b""
    except LanceError:
        return True
    pos, major, minor = int.from_bytes(tail[:8], "little"), tail[8:10], tail[10:12]
    return not (tail[12:] == b"LANC" and major == b"\0\0" and minor == b"\x01\0" and 0 <= pos < size - 16)


def layout_readable(ds: Dataset) -> Any:
    """``readable(index)`` for ``plan_index_actions``: an INVERTED index is rewritten here when
    its ``metadata.lance`` names this library's FTS layout, or pylance's own one it can
    re-tokenize (``retokenizable_fts``) with every fragment it covers still in the dataset (a
    fragment whose rows were all deleted is gone, and pylance's remap keeps its documents:
    such an index stays behind the fragment reuse index); other types need no read."""
    from lance_spark_ops.file.reader import LanceFileReader
    from lance_spark_ops.index.fts.layout import (
        METADATA_FILE,
        fts_metadata,
        remappable_fts_layout,
        retokenizable_fts,
    )

    seen: dict[bytes, bool] = {}
    versions: list[Any] = []

    def check(index: Any) -> bool:
        base = index.base_id if index.HasField("base_id") else None
        store, where = ds.base_resolver.index_dir(uuid_str(index.uuid.uuid), base)
        try:
            reader = LanceFileReader(f"{where}/{METADATA_FILE}", store=store)
        except NotFoundError:  # pylance <= 0.2x's layout: see _refuse_unreadable_reuse
            return False
        meta = fts_metadata(reader.schema.metadata)
        if remappable_fts_layout(meta):
            return True
        field = next((f for f in ds.lance_schema.fields if index.fields and f.id == index.fields[0]), None)
        if field is None or field.name not in ds.schema.names:   # not a top-level column
            return False
        kind = ds.schema.field(field.name).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):   # e.g. list<string>
            return False
        deleted = b""
        if "deleted_fragments" in reader.schema.names:
            col = reader.read().column("deleted_fragments").to_pylist()
            deleted = bytes(col[0] or b"") if col else b""
        if retokenizable_fts(meta, deleted):
            return False
        if not versions:
            versions.append(reuse_versions(ds))
        bm = effective_bitmap(index, versions[0])
        live = ds.manifest.fragment_columns().id
        return bm is not None and bool(np.isin(np.fromiter(bm, np.int64), live).all())

    def readable(index: Any) -> bool:
        if index_kind(index) != "INVERTED":
            return True
        key = bytes(index.uuid.uuid)
        if key not in seen:
            seen[key] = check(index)
        return seen[key]
    return readable


def _reuse_version(ds: Dataset, groups: list[RewriteGroup], dataset_version: int) -> Any:
    from lance_spark_ops._pb import table_pb2

    version = table_pb2.FragmentReuseIndexDetails.Version(dataset_version=dataset_version)
    # object stores: every old fragment's deletion file in flight together
    with FragmentBatch(ds, [f for g in groups for f in g.old_fragments]).fetched_ahead(data=False):
        for g in groups:
            _add_group(ds, version, g)
    return version


def _add_group(ds: Dataset, version: Any, g: RewriteGroup) -> None:
    """One rewrite group of a fragment reuse index version."""
    ids = [f.id for f in g.old_fragments]
    if ids != sorted(ids):
        raise InvalidInputError(f"rewrite group {ids}: a fragment reuse index needs old fragments in "
                                "ascending id order (pylance maps sorted addresses)")
    masks = [ds.dense_live_mask(f) for f in g.old_fragments]
    survivors = surviving_addresses(ids, masks)
    olds = [_digest(f, len(m), int((~m).sum())) for f, m in zip(g.old_fragments, masks, strict=True)]
    version.groups.append(make_group(olds, survivors, [_digest(f) for f in g.new_fragments]))


def _digest(f: DataFragment, rows: int | None = None, deleted: int | None = None) -> FragDigest:
    """A fragment's digest; ``rows`` / ``deleted`` counted by the caller (an old fragment of
    pylance <= 0.7 records neither: the commit fills them in, the digest needs them now)."""
    if deleted is None:
        deleted = f.deletion_file.num_deleted_rows or 0 if f.deletion_file is not None else 0
    return FragDigest(f.id, int(f.physical_rows or 0) if rows is None else rows, int(deleted))


def covering_sets(ds: Dataset) -> tuple[dict[int, frozenset[int]], set[int]]:
    """Per fragment id the positions of the indices covering it (pylance's view), and the
    fragments never rewritten here (see ``covering_columns``)."""
    ids = ds.manifest.fragment_columns().id
    cover, covers, blocked = covering_columns(ds)
    return ({i: covers[k] for i, k in zip(ids.tolist(), cover.tolist(), strict=True)},
            set(ids[blocked].tolist()))


def covering_columns(ds: Dataset) -> tuple[np.ndarray, tuple[frozenset[int], ...], np.ndarray]:
    """Per fragment (manifest order) a key into the tuple of covering sets (positions of the
    indices covering it, pylance's view; equal sets, equal keys), and a mask of the fragments
    never rewritten here: those covered by an index recording no fragment bitmap, and
    (without stable row ids) those with deleted rows covered by an IVF_HNSW_* index this
    library cannot rebuild (files of a layout it does not know), which pylance 14 cannot read
    through the fragment reuse index once rows were deleted ("HNSW graph has N nodes but its
    vector storage has M rows"). Known HNSW indices are rebuilt instead (``index.vector.hnsw``)."""
    cols = ds.manifest.fragment_columns()
    n = len(cols)
    entries = index_entries(ds)
    bitmaps = effective_bitmaps(ds) if entries else []
    pairs = list(zip(entries, bitmaps, strict=True))
    unknown = any(bm is None and i.name != FRAG_REUSE_INDEX_NAME for i, bm in pairs)
    hnsw = BitMap()
    if not ds.uses_stable_row_ids:
        for i, bm in pairs:
            if bm is not None and is_hnsw(index_kind(i)) and not can_remap(i, REMAPPABLE_KINDS):
                hnsw |= bm
    if unknown:
        blocked = np.ones(n, bool)
    elif hnsw:
        blocked = np.isin(cols.id, _ids(hnsw)) & cols.has_deletion
    else:
        blocked = np.zeros(n, bool)
    positions = [p for p, bm in enumerate(bitmaps) if bm is not None]
    if not positions:
        return np.zeros(n, np.int64), (frozenset(),), blocked
    member = np.stack([np.isin(cols.id, _ids(bitmaps[p])) for p in positions], axis=1)
    rows, cover = np.unique(member, axis=0, return_inverse=True)
    covers = tuple(frozenset(p for p, m in zip(positions, row.tolist(), strict=True) if m) for row in rows)
    return cover.reshape(n).astype(np.int64), covers, blocked


def _ids(bm: BitMap) -> np.ndarray:
    return np.asarray(bm.to_array(), dtype=np.int64)


__all__ = ["IndexChanges", "check_defer_allowed", "compaction_index_changes", "covering_columns",
           "covering_sets", "effective_bitmaps", "reuse_versions", "stored_bitmap"]


def make_remapper(job: Job) -> Any:
    """``remap(ds, indices, groups) -> (rewritten, files)`` running one task per index in a
    ``remap_indices`` phase of ``job`` (on Spark, or in this process when it has no session).
    IVF_HNSW_* graphs are rebuilt by further tasks, a run of partitions each (at least
    ``job.tuning.graph_task_min_rows`` vectors, at most one task per slot), and each index's
    ``index.idx`` is then assembled by one task; only descriptors travel through Spark."""

    def remap(ds: Dataset, indices: list[Any], groups: list[RewriteGroup],
              reuse: tuple[bytes, ...] = ()) -> tuple[list[Any], list[str]]:
        # imported here: a compaction without indices never calls it (the index families'
        # modules took ~0.07 s of a process's first compaction)
        from lance_spark_ops.spark.indices.index_remap_tasks import IndexRemapSpec, run_index_remap

        spec_groups = tuple((tuple(f.id for f in g.old_fragments),
                             tuple((f.id, int(f.physical_rows or 0)) for f in g.new_fragments))
                            for g in groups)
        kinds = vector_kinds(ds, indices)
        specs = [IndexRemapSpec(ds.uri, ds.version, i.SerializeToString(), uuidlib.uuid4().bytes, spec_groups,
                                reuse, dict(ds.store.storage_options), kinds.get(bytes(i.uuid.uuid), ""),
                                job.tuning.btree_stream_rows, ds.timestamp)
                 for i in indices]
        job.opened(ds)  # its manifest shipped to the tasks
        try:
            with job.phase("remap_indices", tasks=len(specs)):
                out = job.run_tasks(specs, run_index_remap)
                rewritten = _with_graphs(job, ds, specs, out)
        except BaseException:
            for s in specs:
                _delete_dir(ds, f"_indices/{uuid_str(s.new_uuid)}")
            raise
        files = [f"_indices/{uuid_str(s.new_uuid)}/{f.path}" for s, r in zip(specs, rewritten, strict=True)
                 for f in r.new_index_files]
        return rewritten, files
    return remap


def _with_graphs(job: Job, ds: Dataset, specs: list[Any], out: list[Any]) -> list[Any]:
    """The indices' ``RewrittenIndex`` messages, after the graph and assembly tasks of those
    whose first task left HNSW graphs to rebuild (``index.idx`` added to their files)."""
    from lance_spark_ops.spark.indices.index_remap_tasks import (
        AssembleSpec,
        GraphSpec,
        run_graph_assemble,
        run_graph_build,
    )

    rewritten = [RewrittenIndex.FromString(r[0] if isinstance(r, tuple) else r) for r in out]
    pending = [(k, r[1]) for k, r in enumerate(out) if isinstance(r, tuple)]
    if not pending:
        return rewritten
    slots = default_parallelism(job.spark)  # 1 without a session
    graph_specs, owner = [], []
    for k, work in pending:
        s = specs[k]
        for run in partition_runs(work.kept, work.lengths, slots, job.tuning.graph_task_min_rows):
            graph_specs.append(GraphSpec(s.uri, s.read_version, s.index, s.new_uuid, run, s.storage_options))
            owner.append(k)
    job.plan_more(len(graph_specs) + len(pending))
    parts = job.run_tasks(graph_specs, run_graph_build) if graph_specs else []
    assemble = [AssembleSpec(s.uri, s.read_version, s.index, s.new_uuid, work.kept,
                             tuple(p for p, o in zip(parts, owner, strict=True) if o == k), s.storage_options)
                for k, work in pending for s in (specs[k],)]
    for (k, _), size in zip(pending, job.run_tasks(assemble, run_graph_assemble), strict=True):
        rewritten[k].new_index_files.add(path=INDEX_FILE, size_bytes=size)
    return rewritten


def partition_runs(kept: Sequence[bool], lengths: Sequence[int], slots: int,
                   min_rows: int) -> list[tuple[int, ...]]:
    """The partitions to rebuild (not ``kept``) cut, in order, into runs of about equal vector
    counts: as many as ``slots`` allow with at least ``min_rows`` vectors each (one run when
    the index is small)."""
    todo = [p for p, same in enumerate(kept) if not same]
    if not todo:
        return []
    sizes = np.asarray([max(int(lengths[p]), 1) for p in todo], np.int64)
    runs = int(max(1, min(slots, len(todo), sizes.sum() // max(min_rows, 1))))
    # cut where the running total crosses each multiple of total / runs
    cuts = np.searchsorted(np.cumsum(sizes), sizes.sum() * np.arange(1, runs) / runs, side="left") + 1
    bounds = [0, *sorted(set(np.clip(cuts, 1, len(todo) - 1).tolist())), len(todo)]
    return [tuple(todo[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _delete_dir(ds: Dataset, rel: str) -> None:
    try:
        names = ds.store.list(rel)
    except Exception:  # noqa: BLE001 - nothing written there
        return
    ds.store.delete_many(f"{rel}/{n}" for n in names)


MAX_INDEX_RETRIES = 3


def commit_rewrite(ds: Dataset, groups: list[RewriteGroup], defer: bool, reserved_version: int,
                   remap: Any, known: Sequence[Dataset] = (), inline_limit: int = INLINE_LIMIT,
                   reserve: Callable[[Dataset], Dataset] | None = None,
                   **commit_kwargs: Any) -> tuple[Dataset, IndexChanges]:
    """Prepare the index changes and commit the Rewrite of ``groups`` read at ``ds``.

    When the commit conflicts only because of concurrent index changes (an index created,
    replaced or dropped, another fragment reuse index version) while every version since
    holds our old fragments unchanged, the index part is prepared again against the latest
    version and committed on top of it (lance#5143): a remapped index is never committed over
    a newer version of itself (the Rewrite names the uuid it remapped, which must still exist).
    Index files of attempts that did not land are deleted; data files are the caller's.
    ``known``: versions in memory already (the id reservation's), not read and parsed again.
    ``inline_limit``: ``Tuning.reuse_inline_bytes``. ``commit_kwargs`` go to the commit (a
    migration's ``data_storage_version``). ``reserve(version)``: when the new fragments have
    no ids yet (``ds`` had no index, so none were reserved) and they turn out to need them - an
    index created meanwhile (its remapped bitmap names them), or rows deleted meanwhile to
    carry onto them (deletion files are named by fragment id) - their ids are reserved on top
    of the latest version (it returns the reservation's version); the Rewrite still reads at
    its base, so whatever landed before the reservation is checked and carried as usual.
    """
    bases = [ds]  # the version the next attempt prepares the index changes against
    known = list(known)

    def unreserved() -> bool:
        return reserve is not None and any(f.id == 0 for g in groups for f in g.new_fragments)

    def take_ids(at: Dataset) -> None:
        nonlocal reserved_version
        assert reserve is not None
        reserved = reserve(at)
        known.append(reserved)
        reserved_version = reserved.version
        commit_kwargs["expected_latest"] = reserved.version

    def attempt(_n: int) -> tuple[Dataset, IndexChanges]:
        base = bases[-1]
        if unreserved() and base.manifest_file.index_section is not None:
            take_ids(base)  # the remapped bitmaps name the new fragments by their final ids
        changes = compaction_index_changes(base, groups, defer, reserved_version, remap, inline_limit)
        op = Rewrite(groups, changes.rewritten, frag_reuse_index=changes.frag_reuse_index,
                     frag_reuse_replaces=changes.frag_reuse_replaces, uncovered_indices=changes.uncovered,
                     rewritten_bitmaps=changes.bases)
        try:
            parsed = {d.version: d.manifest_file for d in (base, *known)}
            return Dataset.from_commit(commit_transaction(ds.store, op, base.version,
                                                          known_manifests=parsed, **commit_kwargs)), changes
        except CommitStateUnknown:
            raise  # it may have landed: delete nothing
        except BaseException:
            ds.store.delete_many(changes.files)
            raise

    def on_conflict(_n: int, error: CommitConflict) -> None:
        latest = Dataset.open(ds.store)
        if unreserved():
            take_ids(latest)  # then the same base again: what landed since is rebased with the ids
            return
        if not _only_index_changes(ds.store, bases[-1], latest, groups):
            raise error
        bases.append(latest)

    return retry_on_conflict(attempt, retries=MAX_INDEX_RETRIES, what="compaction commit (index changes)",
                             on_conflict=on_conflict)


def _only_index_changes(store: Any, base: Dataset, latest: Dataset, groups: list[RewriteGroup]) -> bool:
    """Whether every version after ``base`` left our old fragments as they were."""
    ours = {f.id for g in groups for f in g.old_fragments}
    current = {f.id: f for f in latest.fragments}
    if any(f.id not in current or current[f.id] != f for g in groups for f in g.old_fragments):
        return False
    for v in range(base.version + 1, latest.version + 1):
        txn = Dataset.open(store, v).transaction
        if txn is None:
            return False
        hit = touched(txn.operation)
        if hit is None or hit & ours:
            return False
    return True


@dataclass
class RemapIndicesMetrics:
    uri: str
    read_version: int
    new_version: int | None = None
    indices_remapped: dict[str, int] = field(default_factory=dict)  # per index type
    indices_still_behind: dict[str, int] = field(default_factory=dict)  # types not remapped here
    reuse_versions_trimmed: int = 0
    reuse_versions_kept: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)


@with_table_target
def remap_indices(spark: Any, uri: str, *, storage_options: dict[str, Any] | None = None,
                  tuning: Tuning | None = None,
                  max_retries: int = MAX_INDEX_RETRIES) -> RemapIndicesMetrics:
    """Rewrite on executors every index still behind the fragment reuse index (through all its
    versions), then drop the versions every index has caught up with (pylance's rule: made at
    or after the version, covering none of its old fragments). One CreateIndex commit; retried
    from a fresh read when a concurrent commit conflicts with it."""
    metrics = RemapIndicesMetrics(uri, 0)
    with Job(spark, "remap_indices", uri, metrics, tuning) as job:
        def attempt(_n: int) -> None:
            with job.phase("plan"):
                ds = Dataset.open(uri, storage_options=storage_options)
                ds.check_writable()
                ds.check_consistent("remap_indices")
            metrics.read_version = ds.version
            metrics.indices_remapped.clear()
            metrics.indices_still_behind.clear()
            metrics.new_version = _remap_once(job, ds, metrics)

        job.retrying(attempt, retries=max_retries, what="remap_indices commit")
    return metrics


def _remap_once(job: Job, ds: Dataset, metrics: RemapIndicesMetrics) -> int | None:
    from lance_spark_ops.index.frag_reuse import caught_up, new_fragment_bitmap
    from lance_spark_ops.index.kinds import SUMMARY_KINDS, index_kind
    from lance_spark_ops.table.format.transaction import CreateIndex

    fri = frag_reuse_entry(ds)
    if fri is None:
        return None
    versions = reuse_versions(ds)
    entries = [i for i in index_entries(ds) if not i.name.startswith("__lance_")]

    def current(v: Any, i: Any) -> bool:
        # ZONEMAP / BLOOMFILTER are never remapped: once the rewritten fragments left their
        # bitmap (as this library's compaction does) the version no longer concerns them
        if index_kind(i) in SUMMARY_KINDS:
            bm = stored_bitmap(i)
            return bm is None or not any(f.id in bm for g in v.groups for f in g.old_fragments)
        return caught_up(v, i)

    behind = [i for i in entries if not all(current(v, i) for v in versions)]
    readable = layout_readable(ds)
    todo = [i for i in behind if can_remap(i, REMAPPABLE_KINDS, readable=readable)]
    for i in behind:
        target = metrics.indices_remapped if i in todo else metrics.indices_still_behind
        target[index_kind(i)] = target.get(index_kind(i), 0) + 1
    rewritten, files = ([], [])
    if todo:
        rewritten, files = make_remapper(job)(ds, todo, [], tuple(v.SerializeToString() for v in versions))
    new_entries = []
    for idx, r in zip(todo, rewritten, strict=True):
        new = type(idx)()
        new.CopyFrom(idx)
        new.uuid.CopyFrom(r.new_id)
        new.ClearField("base_id")  # rewritten under the dataset's own root
        new.dataset_version = ds.version
        new.fragment_bitmap = bytes(BitMap(effective_bitmap(idx, versions)).serialize())
        del new.files[:]
        new.files.extend(r.new_index_files)
        new_entries.append(new)
    replaced = {bytes(i.uuid.uuid) for i in todo}
    after = [i for i in entries if bytes(i.uuid.uuid) not in replaced] + new_entries
    kept = [v for v in versions if not all(current(v, i) for i in after)]
    metrics.reuse_versions_trimmed = len(versions) - len(kept)
    metrics.reuse_versions_kept = len(kept)
    if not todo and len(kept) == len(versions):
        return None
    names = {n.name for n in new_entries}
    siblings = [i for i in entries if i.name in names and bytes(i.uuid.uuid) not in replaced]
    new_indices, removed = new_entries + siblings, list(todo)
    if len(kept) != len(versions):
        meta, external = build_index(kept, ds.version, new_fragment_bitmap(kept), fri.index_version,
                                     job.tuning.reuse_inline_bytes)
        if external is not None:
            from lance_spark_ops.index.frag_reuse import details_path

            ds.store.write(details_path(meta), external)
            files.append(details_path(meta))
        new_indices.append(meta)
        removed.append(fri)
    try:
        # on top of the version read without listing first (taken meanwhile: listed and checked)
        return commit_transaction(ds.store, CreateIndex(new_indices, removed), ds.version,
                                  known_manifests={ds.version: ds.manifest_file},
                                  expected_latest=ds.version).version
    except CommitStateUnknown:
        raise
    except BaseException:
        ds.store.delete_many(files)
        raise
