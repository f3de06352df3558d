"""Conflict checks between our transaction and each one committed since our read version.

One ``check_<op>_txn(ours, theirs)`` per operation of ours, after Lance's
``TransactionRebase::check_*_txn`` (``rust/lance/src/io/commit/conflict_resolver.rs``). Each
returns a verdict and does no I/O:

* ``Compatible``   commit on top of theirs as is (the manifest is rebuilt from the latest one);
* ``Rebase``       commit after adjusting ours to theirs (two deletes on one fragment: merge the
                   deletion vectors into a new deletion file; see ``commit.rebase``);
* ``Retryable``    ours cannot be committed now, a fresh attempt of the operation may succeed
                   -> ``CommitConflict``;
* ``Incompatible`` theirs makes ours meaningless (the table was overwritten / restored)
                   -> ``IncompatibleTransaction``.

A missing transaction (no inline copy, no ``_transactions`` file, a version gone from the
listing) or an operation this library does not know is ``Retryable``: the spec says to assume a
conflict, and a retry reads past it.

Matrix (row = ours, column = theirs). C compatible, B rebase, R retryable, I incompatible; a
starred entry applies only when both touch a common fragment (otherwise C):

================ ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ======
ours \\ theirs   Append Delete Update Overwr Rewrit Merge  DataRp CrIdx  Projct Restor Reserv UpdCfg Unknwn
================ ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ======
Append           C      C      C      I      C      C      C      C      C      I      C      C      R
Delete           C      B* 1   B* 2   I      R*     R      R*     C      C      I      C      C      R
Update           C      R*     R*     I      R*     R      R*     C      C      I      C      C      R
Overwrite        C      C      C      C 3    C      C      C      C      C      C      C      C 3    R
Rewrite          C      B* 4   B* 4   I      R*     R      R*     R* 5   C      I      C      C      R
Merge            R      R      R      I      R      R      R      C      I      I      C      C      R
DataReplacement  C      C      C      I      R*     C      R* 6   R* 7   C      I      C      C      R
CreateIndex      C      C      C      I      R* 5   C      R* 7   C 8    C      I      C      C      R
Project          C      C      C      I      C      R      C      C      R      I      C      C      R
Restore          C      C      C      C      C      C      C      C      C      C      C      C      R
ReserveFragments C      C      C      I      C      C      C      C      C      I      C      C      R
UpdateConfig     C      C      C      I 3    C      C      C      C      C      C      C      I 3    R
================ ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ====== ======

Clone and UpdateBases (theirs) are compatible with everything (UpdateBases vs UpdateBases:
incompatible when an id, name or path repeats).

1. Delete vs Delete: where theirs only changed deletion files of fragments we delete from, the
   deletion vectors are merged (rows deleted by both stay deleted once: unlike Lance, which
   retries on overlapping rows, a double delete is harmless). A fragment theirs removed whole is
   dropped from ours; a fragment we remove whole stays removed. Changed data files: R.
2. Delete vs Update: as 1, but rows both touched are R (their update moved the rows; deleting
   the old copies would lose our delete), and a fragment theirs removed or we remove whole is R.
3. Only when both upsert (or one upserts and the other deletes) a common config key; for
   UpdateConfig also when theirs is an Overwrite and ours changes schema or field metadata.
4. Handed to ``rebase.rebase_rewrite_over_delete`` (carry the new deletions onto the rewritten
   fragments through the compaction's address map); today that hook answers R.
5. When a new index's fragment bitmap (missing = all) covers a fragment the rewrite replaces.
6. Same fragment and a common field. 7. The replaced file holds a field the new index covers.
8. Except two fragment-reuse indices (R), and when ours replaces indices (``removed_indices``)
   that theirs replaced too, or both list an index of one name (R: ours would put an
   older version of an index over a newer one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lance_spark_ops.table.commit.indices import FRAG_REUSE_INDEX_NAME, fragment_bitmap
from lance_spark_ops.table.format.fragment_run import fragment_ids
from lance_spark_ops.table.format.transaction import (
    Append,
    Clone,
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
    Transaction,
    UnknownOperation,
    Update,
    UpdateBases,
    UpdateConfig,
)


@dataclass(frozen=True)
class Compatible:
    pass


@dataclass(frozen=True)
class Rebase:
    """Ours must be adjusted on these fragments; ``strict`` ones conflict on common rows."""

    kind: str  # "merge_deletions" | "rewrite_over_delete"
    fragment_ids: frozenset[int]
    strict: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Retryable:
    reason: str


@dataclass(frozen=True)
class Incompatible:
    reason: str


Verdict = Compatible | Rebase | Retryable | Incompatible
COMPATIBLE = Compatible()


def _name(op: object) -> str:
    return type(op).__name__


def _why(ours: Operation, theirs: Operation, detail: str = "") -> str:
    return f"our {_name(ours)} vs a concurrent {_name(theirs)}" + (f": {detail}" if detail else "")


def touched(op: Operation) -> set[int] | None:
    """Fragment ids an operation modified or removed (None = every fragment)."""
    if isinstance(op, Delete):
        return {f.id for f in op.updated_fragments} | set(op.deleted_fragment_ids)
    if isinstance(op, Update):
        return {f.id for f in op.updated_fragments} | set(op.removed_fragment_ids)
    if isinstance(op, Rewrite):
        return {i for g in op.all_groups() for i in fragment_ids(g.old_fragments).tolist()}
    if isinstance(op, DataReplacement):
        return {r.fragment_id for r in op.replacements}
    if isinstance(op, Merge | Overwrite | Restore | Project):
        return None
    return set()


def _overlap(ours: set[int], theirs: set[int] | None) -> set[int]:
    return set(ours) if theirs is None else ours & theirs


def _retry_if(common: set[int], ours: Operation, theirs: Operation, detail: str) -> Verdict:
    return Retryable(_why(ours, theirs, detail)) if common else COMPATIBLE


def _always(theirs: Operation) -> Verdict | None:
    """Verdicts that do not depend on ours: unknown ops, clone / base-path additions."""
    if isinstance(theirs, UnknownOperation):
        return Retryable(f"a concurrent transaction has an operation this library does not know "
                         f"({len(theirs.raw)} bytes)")
    if isinstance(theirs, Clone):
        return COMPATIBLE
    return None


# -- per operation of ours ----------------------------------------------------------------------------
def check_append_txn(ours: Append, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    return COMPATIBLE


def _files_changed(ours: Delete | Update, theirs: Delete | Update, ids: set[int]) -> list[int]:
    mine = {f.id: f.files for f in ours.updated_fragments}
    return [f.id for f in theirs.updated_fragments if f.id in ids and f.id in mine and f.files != mine[f.id]]


def check_delete_txn(ours: Delete, theirs: Operation) -> Verdict:
    mod = touched(ours) or set()
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, Merge):
        return Retryable(_why(ours, theirs, "the fragments were rewritten with new columns"))
    if isinstance(theirs, Rewrite | DataReplacement):
        common = _overlap(mod, touched(theirs))
        return _retry_if(common, ours, theirs, f"fragments {sorted(common)} were rewritten")
    if isinstance(theirs, Delete | Update):
        common = _overlap(mod, touched(theirs))
        if not common:
            return COMPATIBLE
        changed = _files_changed(ours, theirs, common)
        if changed:
            return Retryable(_why(ours, theirs, f"data files of fragments {changed} changed"))
        theirs_removed = set(theirs.deleted_fragment_ids if isinstance(theirs, Delete)
                             else theirs.removed_fragment_ids)
        ours_removed = set(ours.deleted_fragment_ids)
        if isinstance(theirs, Update) and common & (theirs_removed | ours_removed):
            both = sorted(common & (theirs_removed | ours_removed))
            return Retryable(_why(ours, theirs, f"fragments {both} were updated and removed"))
        to_merge = common - ours_removed - theirs_removed
        to_drop = (common & theirs_removed) - ours_removed
        if not to_merge and not to_drop:
            return COMPATIBLE  # we remove the fragment whole: their row deletes are subsumed
        strict = frozenset(to_merge) if isinstance(theirs, Update) else frozenset()
        return Rebase("merge_deletions", frozenset(to_merge | to_drop), strict)
    return COMPATIBLE


def check_update_txn(ours: Update, theirs: Operation) -> Verdict:
    mod = touched(ours) or set()
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, Merge):
        return Retryable(_why(ours, theirs))
    if isinstance(theirs, Rewrite | DataReplacement | Delete | Update):
        common = _overlap(mod, touched(theirs))
        return _retry_if(common, ours, theirs, f"both modify fragments {sorted(common)}")
    return COMPATIBLE


def _upserts(op: Operation) -> tuple[set[str], set[str]]:
    """(keys upserted, keys deleted) from the table config."""
    if isinstance(op, Overwrite):
        return set(op.config_upsert_values), set()
    if isinstance(op, UpdateConfig):
        pb = op.pb
        up = set(pb.upsert_values) | {e.key for e in pb.config_updates.update_entries if e.HasField("value")}
        entries = pb.config_updates.update_entries
        down = set(pb.delete_keys) | {e.key for e in entries if not e.HasField("value")}
        return up, down
    return set(), set()


def _config_conflict(a: Operation, b: Operation) -> bool:
    a_up, a_del = _upserts(a)
    b_up, b_del = _upserts(b)
    return bool(a_up & (b_up | b_del)) or bool(b_up & (a_up | a_del))


def check_overwrite_txn(ours: Overwrite, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | UpdateConfig) and _config_conflict(ours, theirs):
        return Incompatible(_why(ours, theirs, "both set a common config key"))
    return COMPATIBLE


def _index_fragments(indices: Iterable[object]) -> set[int] | None:
    out: set[int] = set()
    for idx in indices:
        bm = fragment_bitmap(idx)  # type: ignore[arg-type]
        if bm is None:
            return None
        out.update(bm)
    return out


def check_rewrite_txn(ours: Rewrite, theirs: Operation) -> Verdict:
    mod = touched(ours) or set()
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, Merge):
        return Retryable(_why(ours, theirs))
    if isinstance(theirs, Delete | Update):
        common = _overlap(mod, touched(theirs))
        return Rebase("rewrite_over_delete", frozenset(common)) if common else COMPATIBLE
    if isinstance(theirs, Rewrite | DataReplacement):
        common = _overlap(mod, touched(theirs))
        return Retryable(_why(ours, theirs, f"fragments {sorted(common)} changed")) if common else COMPATIBLE
    if isinstance(theirs, CreateIndex):
        covered = _index_fragments(theirs.new_indices)
        common = _overlap(mod, covered)
        return Retryable(_why(ours, theirs, f"the new index covers fragments {sorted(common)}")) \
            if common else COMPATIBLE
    return COMPATIBLE


def check_merge_txn(ours: Merge, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore | Project):
        return Incompatible(_why(ours, theirs, "the table or its schema was replaced"))
    if isinstance(theirs, Append | Delete | Update | Rewrite | Merge | DataReplacement):
        return Retryable(_why(ours, theirs, "the fragments changed"))
    return COMPATIBLE


def _replaced_fields(op: DataReplacement) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for r in op.replacements:
        out.setdefault(r.fragment_id, set()).update(r.new_file.fields)
    return out


def _indexed_fields(op: CreateIndex) -> set[int]:
    return {f for idx in op.new_indices for f in idx.fields}


def check_data_replacement_txn(ours: DataReplacement, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    mine = _replaced_fields(ours)
    if isinstance(theirs, CreateIndex):
        hit = set().union(*mine.values()) & _indexed_fields(theirs) if mine else set()
        return Retryable(_why(ours, theirs, f"fields {sorted(hit)} were indexed")) if hit else COMPATIBLE
    if isinstance(theirs, Rewrite):
        common = _overlap(set(mine), touched(theirs))
        return _retry_if(common, ours, theirs, f"fragments {sorted(common)} were rewritten")
    if isinstance(theirs, DataReplacement):
        other = _replaced_fields(theirs)
        for frag, fields in mine.items():
            if fields & other.get(frag, set()):
                return Retryable(_why(ours, theirs, f"fragment {frag} fields {sorted(fields & other[frag])}"))
    return COMPATIBLE


def check_create_index_txn(ours: CreateIndex, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, CreateIndex):
        reuse = any(i.name == FRAG_REUSE_INDEX_NAME for i in ours.new_indices) and \
            any(i.name == FRAG_REUSE_INDEX_NAME for i in theirs.new_indices)
        if reuse:
            return Retryable(_why(ours, theirs, "two fragment-reuse indices"))
        # ours replaces indices theirs replaced too (e.g. a remap of an index rebuilt meanwhile):
        # committing ours would put an older version over the newer one
        mine = {bytes(i.uuid.uuid) for i in ours.removed_indices}
        gone = {bytes(i.uuid.uuid) for i in theirs.removed_indices}
        # a CreateIndex replaces every segment of the names it lists: listing a name theirs
        # just wrote (a delta re-listing its siblings too) would drop their segments
        names = {i.name for i in ours.new_indices} & {i.name for i in theirs.new_indices}
        if mine & gone or names:
            return Retryable(_why(ours, theirs, f"indices {sorted(names)} were replaced concurrently"))
        return COMPATIBLE
    if isinstance(theirs, Rewrite):
        covered = _index_fragments(ours.new_indices)
        common = _overlap(touched(theirs) or set(), covered)
        return _retry_if(common, ours, theirs, f"fragments {sorted(common)} were rewritten")
    if isinstance(theirs, DataReplacement):
        hit = set().union(*_replaced_fields(theirs).values(), set()) & _indexed_fields(ours)
        return _retry_if(hit, ours, theirs, f"indexed fields {sorted(hit)} were replaced")
    return COMPATIBLE


def check_project_txn(ours: Project, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, Merge | Project):
        return Retryable(_why(ours, theirs, "the schema changed"))
    return COMPATIBLE


def check_restore_txn(ours: Restore, theirs: Operation) -> Verdict:
    return COMPATIBLE


def check_reserve_fragments_txn(ours: ReserveFragments, theirs: Operation) -> Verdict:
    if isinstance(theirs, Overwrite | Restore):
        return Incompatible(_why(ours, theirs, "the table was replaced"))
    return COMPATIBLE


def check_update_config_txn(ours: UpdateConfig, theirs: Operation) -> Verdict:
    pb = ours.pb
    if isinstance(theirs, Overwrite):
        meta = bool(pb.schema_metadata) or pb.HasField("schema_metadata_updates") or \
            bool(pb.field_metadata) or bool(pb.field_metadata_updates)
        if meta or _config_conflict(ours, theirs):
            return Incompatible(_why(ours, theirs, "the table was replaced"))
    if isinstance(theirs, UpdateConfig) and _config_conflict(ours, theirs):
        return Incompatible(_why(ours, theirs, "both change a common config key"))
    return COMPATIBLE


def check_update_bases_txn(ours: UpdateBases, theirs: Operation) -> Verdict:
    if not isinstance(theirs, UpdateBases):
        return COMPATIBLE
    for a in ours.pb.new_bases:
        for b in theirs.pb.new_bases:
            if (a.id and a.id == b.id) or (a.HasField("name") and a.name == b.name) or a.path == b.path:
                return Incompatible(_why(ours, theirs, f"base path {a.path!r} registered twice"))
    return COMPATIBLE


_CHECKS = {
    Append: check_append_txn, Delete: check_delete_txn, Update: check_update_txn,
    Overwrite: check_overwrite_txn, Rewrite: check_rewrite_txn, Merge: check_merge_txn,
    DataReplacement: check_data_replacement_txn, CreateIndex: check_create_index_txn,
    Project: check_project_txn, Restore: check_restore_txn, ReserveFragments: check_reserve_fragments_txn,
    UpdateConfig: check_update_config_txn, UpdateBases: check_update_bases_txn,
}


def check_txn(ours: Transaction, theirs: Transaction | None, their_version: int | None = None) -> Verdict:
    """Verdict for committing ``ours`` after ``theirs`` (None = its transaction is missing)."""
    at = f" (version {their_version})" if their_version is not None else ""
    if theirs is None:
        return Retryable(f"the transaction of a concurrent commit{at} is missing; assuming a conflict")
    fixed = _always(theirs.operation)
    if fixed is not None:
        return fixed
    op = ours.operation
    if isinstance(op, Clone):
        return COMPATIBLE
    check = _CHECKS.get(type(op))
    if check is None:
        return Retryable(f"cannot check our {_name(op)} against concurrent commits")
    verdict = check(op, theirs.operation)  # type: ignore[operator]
    if at and isinstance(verdict, Retryable | Incompatible):
        return type(verdict)(verdict.reason + at)
    return verdict
