"""Rebasing our transaction onto concurrent commits that ``conflict.check_txn`` said need it.

``merge_deletions`` (our Delete after their Delete / Update on the same fragments): for each
such fragment, ``ours_new = our deleted offsets - those at our read version``; the new
deletion set is ``current deleted offsets | ours_new``, written as a new deletion file
``_deletions/{frag}-{current version}-{random}.{arrow|bin}`` (Arrow up to 5000 rows, as
pylance). A fragment left with no live row is removed instead; a fragment the other side
removed is dropped from ours (its rows are gone). Against an Update, rows both touched make
the commit fail with CommitConflict. The transaction's ``read_version`` becomes the current
version, so the next round of checks starts there.

``rewrite_over_delete`` (our Rewrite after a Delete / Update that deleted rows of fragments
it rewrote): carry those deletions through the old -> new row-address map onto the new
fragments and commit, instead of retrying the whole rewrite as Lance does (lance#4604,
lance#6150). See ``rebase_rewrite_over_delete``.

Files written here are recorded in ``RebaseContext.written``: they belong to the commit, which
deletes them when it surely did not land or when a later round supersedes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lance_spark_ops.errors import CommitConflict
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.conflict import Rebase
from lance_spark_ops.table.deletion import deleted_offsets, write_deletion_file
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.manifest import Manifest
from lance_spark_ops.table.format.transaction import Delete, Rewrite, RewriteGroup, Transaction
from lance_spark_ops.table.paths import deletion_file_path

__all__ = ["RebaseContext", "rebase", "rebase_merge_deletions", "rebase_rewrite_over_delete"]


@dataclass
class RebaseContext:
    """What a rebase may look at: the manifest ours was built on and the latest one."""

    store: ObjectStore
    base: Manifest  # the manifest at ours.read_version
    current: Manifest  # the latest committed manifest
    hints: Mapping[str, Any] = field(default_factory=dict)  # from the caller (e.g. an address map)
    written: list[str] = field(default_factory=list)  # relative paths of files written by rebases


def _fragment(m: Manifest, fragment_id: int) -> DataFragment | None:
    for f in m.fragments:
        if f.id == fragment_id:
            return f
    return None


def _deleted(ctx: RebaseContext, frag: DataFragment) -> np.ndarray:
    return deleted_offsets(ctx.store, frag).astype(np.int64)


def rebase_merge_deletions(txn: Transaction, verdict: Rebase, ctx: RebaseContext) -> Transaction:
    """Merge our deletions into the current deletion files of ``verdict.fragment_ids``."""
    op = txn.operation
    if not isinstance(op, Delete):
        raise CommitConflict(f"cannot merge deletions into a {type(op).__name__}")
    updated = {f.id: f for f in op.updated_fragments}
    removed = list(op.deleted_fragment_ids)
    for fid in sorted(verdict.fragment_ids):
        mine = updated.get(fid)
        if mine is None:
            continue  # we remove it whole; the other side only deleted rows from it
        cur = _fragment(ctx.current, fid)
        if cur is None:
            del updated[fid]  # removed by the other side: our deletes are moot
            continue
        base = _fragment(ctx.base, fid)
        if base is None:
            raise CommitConflict(f"fragment {fid} is not in version {ctx.base.version} that our delete read")
        base_del = _deleted(ctx, base)
        ours_new = np.setdiff1d(_deleted(ctx, mine), base_del)
        cur_del = _deleted(ctx, cur)
        if fid in verdict.strict:
            both = np.intersect1d(np.setdiff1d(cur_del, base_del), ours_new)
            if both.size:
                raise CommitConflict(f"fragment {fid}: rows {both[:5].tolist()} were updated by a concurrent "
                                     f"commit after version {ctx.base.version} and deleted by us")
        merged = np.union1d(cur_del, ours_new)
        if cur.physical_rows is not None and merged.size >= cur.physical_rows:
            del updated[fid]
            removed.append(fid)
            continue
        previous = cur.deletion_file.file_type if cur.deletion_file is not None else None
        dfile = write_deletion_file(ctx.store, fid, ctx.current.version, merged, previous)
        if dfile is not None:
            ctx.written.append(deletion_file_path(fid, dfile))
        updated[fid] = replace(cur, deletion_file=dfile)
    new_op = replace(op, updated_fragments=[updated[f.id] for f in op.updated_fragments if f.id in updated],
                     deleted_fragment_ids=removed)
    return replace(txn, operation=new_op, read_version=ctx.current.version)


def rebase_rewrite_over_delete(txn: Transaction, verdict: Rebase, ctx: RebaseContext) -> Transaction:
    """Carry rows deleted concurrently from fragments our Rewrite replaces onto its new fragments.

    The old -> new address map needs no hint: a rewrite writes the live rows of its old
    fragments (as of our read version), fragment by fragment in offset order, into its new
    fragments in order. So the k-th live row of a group lands at global position k, which
    the new fragments' row counts turn into (new fragment, offset). Rows deleted since our
    read version are found by comparing each old fragment's current deletion vector (or its
    removal) with the one we read; they become deletion files on the new fragments.

    A concurrent change other than row deletion (an Update that rewrote the old fragment's
    data files) cannot be carried: CommitConflict. New fragments must already have their
    final ids (the compaction job reserves them) because deletion file names carry them.
    """
    op = txn.operation
    if not isinstance(op, Rewrite):
        raise CommitConflict(f"cannot carry deletions into a {type(op).__name__}")
    groups = []
    for group in op.all_groups():
        old_ids = {f.id for f in group.old_fragments}
        if not old_ids & set(verdict.fragment_ids):
            groups.append(group)
            continue
        # Old fragments removed meanwhile (every row deleted) are no longer there to replace.
        still_there = [f for f in group.old_fragments if _fragment(ctx.current, f.id) is not None]
        groups.append(RewriteGroup(still_there, _carry_deletions(group, ctx)))
    new_op = replace(op, groups=groups, legacy_group=None)
    return replace(txn, operation=new_op, read_version=ctx.current.version)


def _carry_deletions(group: RewriteGroup, ctx: RebaseContext) -> list[DataFragment]:
    positions = []  # global positions (in the group's output order) of rows deleted since our read
    offset = 0
    for old in group.old_fragments:
        base = _fragment(ctx.base, old.id)
        if base is None or base.physical_rows is None:
            raise CommitConflict(f"fragment {old.id} is not in version {ctx.base.version} that the rewrite "
                                 "read")
        keep = np.ones(base.physical_rows, dtype=bool)
        keep[_deleted(ctx, base)] = False
        live = np.flatnonzero(keep)
        cur = _fragment(ctx.current, old.id)
        if cur is None:
            gone = np.arange(live.size)  # removed whole: all its rows are deleted now
        else:
            if [f.path for f in cur.files] != [f.path for f in base.files]:
                raise CommitConflict(f"fragment {old.id} was rewritten by a concurrent commit; retry the "
                                     "rewrite")
            newly = np.setdiff1d(_deleted(ctx, cur), _deleted(ctx, base))
            gone = np.searchsorted(live, newly)
        positions.append(gone + offset)
        offset += live.size
    deleted = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    out, start = [], 0
    for frag in group.new_fragments:
        rows = int(frag.physical_rows or 0)
        if deleted.size and frag.id == 0:
            raise CommitConflict("new fragments have no ids yet; reserve fragment ids before committing")
        mine = deleted[(deleted >= start) & (deleted < start + rows)] - start
        start += rows
        if mine.size == 0:
            out.append(frag)
            continue
        if mine.size >= rows:
            continue  # every row of it was deleted: the new fragment is dropped
        previous = frag.deletion_file.file_type if frag.deletion_file is not None else None
        dfile = write_deletion_file(ctx.store, frag.id, ctx.current.version, mine, previous)
        if dfile is not None:
            ctx.written.append(deletion_file_path(frag.id, dfile))
        out.append(replace(frag, deletion_file=dfile))
    return out


Rebaser = Callable[[Transaction, Rebase, RebaseContext], Transaction]
REBASERS: dict[str, Rebaser] = {
    "merge_deletions": rebase_merge_deletions,
    "rewrite_over_delete": rebase_rewrite_over_delete,
}


def rebase(txn: Transaction, verdicts: list[Rebase], ctx: RebaseContext) -> Transaction:
    """Apply every rebase verdict of one round (fragments grouped per kind)."""
    by_kind: dict[str, Rebase] = {}
    for v in verdicts:
        prev = by_kind.get(v.kind)
        by_kind[v.kind] = v if prev is None else Rebase(v.kind, prev.fragment_ids | v.fragment_ids,
                                                         prev.strict | v.strict)
    for kind, v in by_kind.items():
        fn = REBASERS.get(kind)
        if fn is None:
            raise CommitConflict(f"no rebase for {kind!r}")
        txn = fn(txn, v, ctx)
    if by_kind:
        txn = replace(txn, read_version=ctx.current.version)
    return txn
