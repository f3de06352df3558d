"""One validation of a manifest against itself and its files (issue #34).

``manifest_findings`` checks what the manifest alone says (no I/O: the fragment columns, the
fragments' file lists, inline row-id sequences, the index section); ``file_findings`` checks
one data file's footer and object size against its manifest entry, from a reader a scan opens
anyway; ``deletion_finding`` a deletion file's length against its recorded count.

Each finding names the fragment, the file and the check, and whether a rewrite must refuse
the table (``refuse``). What pylance 14 does with each inconsistency, and so what we do:

=====================  ======================================  ==========================================
check                  pylance 14 reads / compacts             we
=====================  ======================================  ==========================================
duplicate_fragment_id  reads every entry (rows twice when the  read as pylance; rewrites refuse
                       entry repeats); compaction fails        (a rewrite would commit the rows twice)
no_data_files          refuses ("does not contain any data")   refuse read and rewrite
mixed_file_versions    reads; refuses every commit ("mixture   read; every commit refuses
                       of file versions", legacy datasets)
file_version           refuses (data file has version X, the   refuse read and rewrite
                       manifest default is Y; 2.x datasets)
file_size              refuses 2.x files (invalid range)       refuse read and rewrite (2.x files)
physical_rows          reads the recorded count (2.x: first N  refuse read and rewrite; when the version
                       rows only) unless the manifest names no  names no writer (lance#1531, Lance
                       writer: then the file's count           0.7.5 -> 0.8.0) the file's count, as pylance
deleted_rows           reads the deletion file; compaction     read as pylance; rewrites refuse
                       fails
max_fragment_id        reads; new ids may collide              repaired: ids allocated above every id
shared_data_file       reads each fragment's entry; compacts   reported (rows kept by a rewrite)
row_id_overlap         reads; compacts                         reported
index_fragment         reads; compacts                         reported (ids above max_fragment_id)
fragment_order         reads; compacts                         reported (pylance's validate() fails)
pylance_unreadable     fails to read the column (pages          read; reported by the validate job
                       disagree on a struct-over-list layer's  (``file.pylance_quirks``); a re-encoding
                       validity)                               rewrite writes it readably
=====================  ======================================  ==========================================
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lance_spark_ops.errors import InconsistentDatasetError, LanceError
from lance_spark_ops.table.format.fragment import DataFile, DataFragment, ExternalFile
from lance_spark_ops.table.format.manifest import Manifest

# checks a rewrite refuses the table for (the others are repaired or only reported)
REFUSING = frozenset({"duplicate_fragment_id", "no_data_files", "mixed_file_versions", "file_version",
                      "file_size", "physical_rows", "deleted_rows"})
# bounds the row ids decoded for the overlap check (inline sequences only)
ROW_ID_CHECK_LIMIT = 50_000_000


@dataclass(frozen=True)
class Finding:
    """One inconsistency: where (fragment, file), which check and what was found."""

    check: str
    detail: str
    fragment: int | None = None
    file: str | None = None

    @property
    def refuse(self) -> bool:
        return self.check in REFUSING

    def row(self, table: str, version: int) -> dict[str, Any]:
        """The JSON row the validate job prints."""
        return {"table": table, "version": version, "fragment": self.fragment, "file": self.file,
                "check": self.check, "detail": self.detail}

    def __str__(self) -> str:
        where = [] if self.fragment is None else [f"fragment {self.fragment}"]
        if self.file:
            where.append(f"file {self.file}")
        return f"{self.check} ({', '.join(where) or 'dataset'}): {self.detail}"


def refusal(findings: Iterable[Finding], what: str,
            path: str | None = None) -> InconsistentDatasetError | None:
    """The error a rewrite raises for the refusing findings (None when there are none)."""
    bad = [f for f in findings if f.refuse]
    if not bad:
        return None
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return InconsistentDatasetError(f"{what} refused: the manifest contradicts itself or its files: "
                                    + "; ".join(str(f) for f in bad[:3]) + more
                                    + "; run the validate job for every finding", path=path)


def check_before_rewrite(manifest: Manifest, what: str, path: str | None = None,
                         indices: Sequence[Any] | None = None, *, deep: bool = True) -> list[Finding]:
    """``manifest_findings``; raises ``InconsistentDatasetError`` when one refuses a rewrite,
    else returns the findings (reported ones)."""
    found = manifest_findings(manifest, indices, deep=deep)
    err = refusal(found, what, path)
    if err is not None:
        raise err
    return found


# -- the manifest alone ----------------------------------------------------------------------
def manifest_findings(manifest: Manifest, indices: Sequence[Any] | None = None, *,
                      deep: bool = True) -> list[Finding]:
    """Every inconsistency the manifest shows without reading a file (fragment ids, file lists,
    file versions, ``max_fragment_id``, inline row ids, index coverage). ``deep=False`` (a
    commit's check) looks at the fragment columns only - no fragment object is built - and at
    the file lists of legacy (0.1) datasets, where a mixture of file versions hides."""
    out: list[Finding] = []
    cols = manifest.fragment_columns()
    ids = cols.id
    if len(ids) == 0:
        return out
    uniq, counts = np.unique(ids, return_counts=True)
    for i in uniq[counts > 1].tolist():
        out.append(Finding("duplicate_fragment_id", f"{int(counts[np.searchsorted(uniq, i)])} fragment "
                           f"entries have id {i}", fragment=int(i)))
    back = np.flatnonzero(np.diff(ids) < 0)
    if len(back):
        k = int(back[0]) + 1
        out.append(Finding("fragment_order", f"fragment ids are not ascending: {int(ids[k])} after "
                           f"{int(ids[k - 1])}", fragment=int(ids[k])))
    for k in np.flatnonzero(cols.num_files == 0).tolist():
        out.append(Finding("no_data_files", "the fragment has no data files", fragment=int(ids[k])))
    if manifest.max_fragment_id is not None and int(ids.max()) > manifest.max_fragment_id:
        out.append(Finding("max_fragment_id", f"max_fragment_id is {manifest.max_fragment_id} but fragment "
                           f"{int(ids.max())} exists (new ids are allocated above every id)",
                           fragment=int(ids.max())))
    if deep or manifest.data_storage_version == "0.1":
        out.extend(_file_list_findings(manifest))
    if deep and manifest.uses_stable_row_ids:
        out.extend(_row_id_findings(manifest.fragments))
    if indices:
        out.extend(_index_findings(manifest, indices))
    return out


def _file_list_findings(manifest: Manifest) -> list[Finding]:
    out: list[Finding] = []
    storage = manifest.data_storage_version
    owner: dict[tuple[int | None, str], int] = {}
    legacy_at: int | None = None
    v2_at: int | None = None
    for frag in manifest.fragments:
        for df in frag.files:
            key = (df.base_id, df.path)
            first = owner.setdefault(key, frag.id)
            if first != frag.id:
                out.append(Finding("shared_data_file", f"the data file is also fragment {first}'s",
                                   fragment=frag.id, file=df.path))
            if df.is_legacy:
                legacy_at = frag.id if legacy_at is None else legacy_at
            else:
                v2_at = frag.id if v2_at is None else v2_at
                if storage != "0.1" and df.file_version != storage:
                    out.append(Finding("file_version", f"data file has version {df.file_version}, the "
                                       f"manifest's data storage version is {storage}", fragment=frag.id,
                                       file=df.path))
            if storage != "0.1" and df.is_legacy:
                out.append(Finding("file_version", f"legacy (v1) data file in a {storage} dataset",
                                   fragment=frag.id, file=df.path))
    if storage == "0.1" and legacy_at is not None and v2_at is not None:
        out.append(Finding("mixed_file_versions", f"the dataset contains a mixture of file versions: "
                           f"fragment {legacy_at} has v1 files, fragment {v2_at} 2.x files (pylance refuses "
                           "every commit; roll back to an earlier version)", fragment=v2_at))
    return out


def _row_id_findings(fragments: list[DataFragment]) -> list[Finding]:
    from lance_spark_ops.table.format.rowids import RowIdSequence
    from lance_spark_ops.table.rowids import decode_row_ids

    parts, owners = [], []
    total = 0
    for frag in fragments:
        meta = frag.row_id_meta
        if meta is None or isinstance(meta, ExternalFile):
            continue  # external sequences are checked where they are read
        try:
            ids = decode_row_ids(RowIdSequence.from_bytes(meta, None))
        except LanceError as e:
            return [Finding("row_ids", f"row-id sequence does not decode: {e.message}", fragment=frag.id)]
        total += len(ids)
        if total > ROW_ID_CHECK_LIMIT:
            return []
        parts.append(ids)
        owners.append(np.full(len(ids), frag.id, dtype=np.int64))
    if len(parts) < 2:
        return []
    ids = np.concatenate(parts)
    order = np.argsort(ids, kind="stable")
    dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if not len(dup):
        return []
    own = np.concatenate(owners)[order]
    pairs = sorted({(int(own[k]), int(own[k + 1])) for k in dup[:1000].tolist() if own[k] != own[k + 1]})
    return [Finding("row_id_overlap", f"{len(dup)} row id(s) appear in more than one place, e.g. fragments "
                    f"{a} and {b}", fragment=b) for a, b in pairs[:10]]


def _index_findings(manifest: Manifest, indices: Sequence[Any]) -> list[Finding]:
    from pyroaring import BitMap

    top = manifest.fragment_max_id()
    out: list[Finding] = []
    for idx in indices:
        if not getattr(idx, "fragment_bitmap", b""):
            continue
        ids = BitMap.deserialize(idx.fragment_bitmap)
        if top is not None and len(ids) and ids.max() > top:
            ghosts = [i for i in ids if i > top][:5]
            out.append(Finding("index_fragment", f"index {idx.name!r} covers fragment(s) {ghosts} above "
                               f"every fragment id ever given ({top})", fragment=int(ghosts[0])))
    return out


# -- what a scan's readers show -----------------------------------------------------------------
def file_findings(fragment: DataFragment, df: DataFile, *, footer_rows: int, footer_version: str | None,
                  object_size: int | None, trust_counts: bool = True) -> list[Finding]:
    """One opened data file against its manifest entry: rows (unless ``trust_counts`` is False:
    a manifest without a writer version, whose counts pylance does not trust either), its
    footer's version and its object size (2.x files; pylance ignores v1 sizes)."""
    out: list[Finding] = []
    declared = fragment.physical_rows
    if trust_counts and declared is not None and declared != footer_rows:
        out.append(Finding("physical_rows", f"data file has {footer_rows} rows, fragment {fragment.id} "
                           f"records {declared}", fragment=fragment.id, file=df.path))
    if df.is_legacy:
        return out
    if footer_version is not None and footer_version != df.file_version:
        out.append(Finding("file_version", f"the footer says {footer_version}, the manifest "
                           f"{df.file_version}", fragment=fragment.id, file=df.path))
    if object_size is not None and df.file_size_bytes and df.file_size_bytes != object_size:
        out.append(Finding("file_size", f"the object has {object_size} bytes, the manifest records "
                           f"{df.file_size_bytes}", fragment=fragment.id, file=df.path))
    return out


def deletion_finding(fragment: DataFragment, deleted: int) -> Finding | None:
    """The deletion file holds ``deleted`` offsets: a finding when the manifest records another count."""
    d = fragment.deletion_file
    if d is None or d.num_deleted_rows is None or d.num_deleted_rows == deleted:
        return None
    return Finding("deleted_rows", f"the deletion file holds {deleted} rows, the manifest records "
                   f"{d.num_deleted_rows}", fragment=fragment.id)


def raise_if_refused(findings: Iterable[Finding], where: str | None) -> None:
    """``InconsistentDatasetError`` for the first refusing finding (a read's check)."""
    for f in findings:
        if f.refuse:
            raise InconsistentDatasetError(str(f), path=where)


def findings_json(findings: Iterable[Finding], table: str, version: int) -> str:
    return "\n".join(json.dumps(f.row(table, version)) for f in findings)


def as_dict(f: Finding) -> dict[str, Any]:
    return asdict(f)
