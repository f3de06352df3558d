"""Commit a transaction: write its files, put the next manifest atomically, retry on races.

One attempt (Lance's ``commit_transaction``)::

    list _versions/ once (+ the external store)        -> latest version L
    for each version v committed after the last one checked: read its transaction
        (inline in the manifest file, else _transactions/<name>; missing = conflict)
        and check it against ours (``conflict.check_txn``)
        incompatible -> IncompatibleTransaction; retryable -> CommitConflict
        rebase -> adjust ours (``rebase``), e.g. merge two deletes' deletion vectors
    build manifest L + 1 from manifest L and ours (``operations.build_manifest``)
    write the manifest file with our transaction inline and the index section, through the
        commit handler's put-if-not-exists of _versions/<name of L + 1>, and beside that put
        _transactions/{read_version}-{uuid}.txn (the same Transaction bytes; Lance writes it
        first, a round trip of its own: readers since Lance 0.40 take the inline copy;
        LSO_TRANSACTION_FILE_FIRST=1 keeps Lance's order)
    lost the race -> sleep (backoff with jitter) and go again; won -> write
        _versions/latest_version_hint.json (best effort) and return the new version

Who deletes what: data files and deletion files named in the operation belong to the
caller, who deletes them when the commit raises ``CommitConflict`` or
``IncompatibleTransaction`` (the operation surely did not land) and never after
``CommitStateUnknown``. The files the commit writes itself - transaction files, deletion
files made by a rebase - are deleted by it when it surely did not land, and superseded ones
(an earlier attempt's transaction file) after it landed. A manifest is only ever created
whole (temp file + link, conditional put, or a staged copy), so a crash leaves no partial
manifest: at worst an unreferenced transaction file. A version whose transaction file
failed twice while its manifest landed stays committed (a warning names the file).
"""

from __future__ import annotations

import logging
import os
import time
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lance_spark_ops.concurrency import beside
from lance_spark_ops.errors import (
    CommitConflict,
    CommitError,
    CommitStateUnknown,
    CorruptFileError,
    IncompatibleTransaction,
    InconsistentDatasetError,
    InvalidInputError,
    NotFoundError,
    WriteRefused,
)
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.conflict import Incompatible, Rebase, Retryable, check_txn
from lance_spark_ops.table.commit.handler import (
    CommitHandler,
    ExternalManifestStore,
    PutIfNotExistsCommitHandler,
    VersionListing,
    handler_for,
)
from lance_spark_ops.table.commit.indices import index_section
from lance_spark_ops.table.commit.migrate import repair_manifest, trusted_indices
from lance_spark_ops.table.commit.operations import BuildOptions, build_manifest
from lance_spark_ops.table.commit.rebase import RebaseContext, rebase
from lance_spark_ops.table.commit.retry import backoff_seconds
from lance_spark_ops.table.format.feature_flags import FLAG_DISABLE_TRANSACTION_FILE, check_writable
from lance_spark_ops.table.format.manifest import ManifestFile, parse_manifest_file, serialize_manifest_file
from lance_spark_ops.table.format.transaction import (
    CreateIndex,
    DataReplacement,
    Merge,
    Operation,
    ReserveFragments,
    Restore,
    Rewrite,
    Transaction,
    Update,
)
from lance_spark_ops.table.paths import (
    LATEST_VERSION_HINT,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    ManifestNamingScheme,
    deletion_file_path,
    parse_version_hint,
    scan_versions,
    transaction_file_path,
    version_hint_bytes,
)
from lance_spark_ops.table.validate import Finding, check_before_rewrite, manifest_findings

# operations that rewrite or re-index the rows of the version they build on
REWRITES = (Rewrite, ReserveFragments, Merge, DataReplacement, CreateIndex, Update)

__all__ = ["DEFAULT_MAX_RETRIES", "CommitResult", "commit_transaction", "load_transaction"]

logger = logging.getLogger("lance_spark_ops")

DEFAULT_MAX_RETRIES = 20


def load_transaction(store: ObjectStore, mf: ManifestFile) -> Transaction | None:
    """The transaction that made a version: inline copy, else its ``_transactions`` file."""
    try:
        if mf.transaction_bytes is not None:
            return mf.transaction
        name = mf.manifest.transaction_file
        if not name:
            return None
        rel = transaction_file_path(name, mf.path)
        return Transaction.from_bytes(store.read(rel), store.uri(rel))
    except (NotFoundError, CorruptFileError):
        return None


@dataclass(frozen=True)
class CommitResult:
    """What a landed commit produced: the new manifest and where it was written.

    The read side wraps it (``Dataset.from_commit``); this layer never builds a Dataset."""

    store: ObjectStore
    manifest_file: ManifestFile
    naming_scheme: ManifestNamingScheme
    manifest_name: str  # file name under _versions/
    handler: CommitHandler
    manifest_bytes: bytes | None = field(default=None, repr=False)  # the file as written (None: not kept)

    @property
    def version(self) -> int:
        return self.manifest_file.manifest.version

    @property
    def manifest_path(self) -> str:
        return f"{VERSIONS_DIR}/{self.manifest_name}"


@dataclass
class _Attempt:
    """State kept across the attempts of one commit."""

    store: ObjectStore
    handler: CommitHandler
    txn: Transaction
    checked: int  # every version <= checked has been checked against txn
    hints: Mapping[str, Any]
    manifests: dict[int, ManifestFile] = field(default_factory=dict)
    txn_files: dict[str, bytes] = field(default_factory=dict)  # name -> bytes written
    rebase_files: list[str] = field(default_factory=list)
    unknown: bool = False  # an interrupted put may have landed: delete nothing
    # Every rebase starts over from the transaction as first built (its read version and the
    # rewrite's address map) with all verdicts so far: rebasing an already rebased transaction
    # would map deletions through the wrong live rows and drop the ones carried before.
    origin: Transaction | None = None
    rebases: list[Rebase] = field(default_factory=list)
    refused: WriteRefused | None = None  # the last attempt's put was refused unexecuted (S3 503)
    expected_latest: int | None = None  # see ``commit_transaction``: used by the first attempt only

    def manifest_file(self, version: int, listing: VersionListing) -> ManifestFile | None:
        if version not in self.manifests:
            rel = self.handler.resolve(self.store, version, listing)
            if rel is None and not listing.complete:  # older than the newest versions listed
                rel = self.handler.resolve(self.store, version, self.handler.list_versions(self.store))
            if rel is None:
                return None
            self.manifests[version] = parse_manifest_file(self.store.read(rel), self.store.uri(rel))
        return self.manifests[version]

    def cleanup(self, keep_txn: str | None = None,
                keep_files: set[str] | frozenset[str] = frozenset()) -> None:
        for name in self.txn_files:
            if name != keep_txn:
                self.store.delete(f"{TRANSACTIONS_DIR}/{name}")
        for rel in self.rebase_files:
            if rel not in keep_files:
                self.store.delete(rel)


def _check_new_versions(att: _Attempt, listing: VersionListing, latest: int) -> int | None:
    """Check (and rebase over) every version committed since the last check; the version that
    is our own transaction (an earlier attempt's put that landed although it reported a
    refusal), if one is."""
    rebases: list[Rebase] = []
    retry: Retryable | None = None
    for v in range(att.checked + 1, latest + 1):
        mf = att.manifest_file(v, listing)
        theirs = load_transaction(att.store, mf) if mf is not None else None
        if theirs is not None and theirs.uuid == att.txn.uuid:
            return v
        verdict = check_txn(att.txn, theirs, v)
        if isinstance(verdict, Incompatible):  # wins over a retryable one: retrying cannot help
            raise IncompatibleTransaction(verdict.reason, path=att.store.uri(""))
        if isinstance(verdict, Retryable):
            retry = retry or verdict
        elif isinstance(verdict, Rebase):
            rebases.append(verdict)
    if retry is not None:
        raise CommitConflict(retry.reason, path=att.store.uri(""))
    if rebases:
        att.origin = att.origin or att.txn
        att.rebases.extend(rebases)
        base = att.manifest_file(att.origin.read_version, listing)
        current = att.manifest_file(latest, listing)
        if base is None or current is None:
            raise CommitConflict(f"version {att.origin.read_version} that our transaction read is gone",
                                 path=att.store.uri(""))
        ctx = RebaseContext(att.store, base.manifest, current.manifest, att.hints)
        try:
            att.txn = rebase(att.origin, att.rebases, ctx)
        finally:
            att.rebase_files.extend(ctx.written)
    att.checked = latest
    return None


def _landed_earlier(att: _Attempt, version: int, listing: VersionListing) -> CommitResult:
    """The result of our transaction found committed as ``version`` by a later attempt; every
    file the attempts wrote is kept (which rebase's files that version names is not tracked)."""
    rel = att.handler.resolve(att.store, version, listing)
    if rel is None:
        rel = att.handler.resolve(att.store, version, att.handler.list_versions(att.store))
    mf = att.manifests[version]
    if rel is None or listing.scheme is None:  # cannot be: the version was just read
        raise CommitStateUnknown(f"our transaction is version {version}, whose manifest is gone",
                                 path=att.store.uri(VERSIONS_DIR))
    _write_hint(att.store, version)
    return CommitResult(att.store, mf, listing.scheme, rel.rsplit("/", 1)[-1], att.handler)


def _write_hint(store: ObjectStore, version: int) -> None:
    """Best effort: pylance 14 writes ``{"version": N}`` after each commit on local storage
    (on S3 it writes none: two requests a commit saved); never lower it."""
    if store.protocol not in ("file", "local", "memory"):
        return
    rel = f"{VERSIONS_DIR}/{LATEST_VERSION_HINT}"
    try:
        try:  # read it straight away (no existence check first: one request fewer per commit)
            current = parse_version_hint(store.read(rel))
        except NotFoundError:
            current = None
        if current is None or current < version:
            store.write(rel, version_hint_bytes(version))
    except Exception:  # noqa: BLE001 - a hint must never fail a commit
        pass


def commit_transaction(
    target: str | ObjectStore,
    operation: Operation,
    read_version: int | None,
    *,
    storage_options: dict[str, Any] | None = None,
    manifest_store: ExternalManifestStore | CommitHandler | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    enable_v2_manifest_paths: bool = True,
    enable_stable_row_ids: bool = False,
    data_storage_version: str | None = None,
    must_create: bool = False,
    tag: str = "",
    transaction_properties: dict[str, str] | None = None,
    rebase_hints: Mapping[str, Any] | None = None,
    known_manifests: Mapping[int, ManifestFile] | None = None,
    expected_latest: int | None = None,
) -> CommitResult:
    """Commit ``operation`` made from version ``read_version`` (0 / None: a new dataset).

    Returns the new version's manifest (``Dataset.from_commit`` opens it). Raises CommitConflict
    (retry the operation from a fresh read), IncompatibleTransaction (give up), CommitStateUnknown
    (it may have landed: delete nothing), UnsupportedError (unknown writer feature flag),
    NotFoundError (no such dataset / version).
    ``must_create`` fails with IncompatibleTransaction when the dataset exists.
    ``enable_v2_manifest_paths`` / ``enable_stable_row_ids`` / ``data_storage_version`` shape a
    new dataset (an Overwrite may also change the storage version).
    ``known_manifests``: version -> its manifest file, already parsed by the caller (a
    ``Dataset`` passes its own), so a 100 000-fragment manifest is not read and parsed again.
    ``expected_latest``: the version the caller believes latest - one it committed or opened a
    moment ago - with its manifest (and every one since ``read_version``) in
    ``known_manifests`` (a compaction's id reservation and its Rewrite): the first attempt puts
    the next version without listing ``_versions/`` first. With the store's create-if-absent a
    free next version proves it the latest (versions have no gaps); taken, that put fails and
    the attempt lists and checks as usual (one request lost; a LIST saved when it holds). The
    default put-if-not-exists handler only.
    """
    store = target if isinstance(target, ObjectStore) else ObjectStore(target, storage_options or {})
    if max_retries < 0:
        raise InvalidInputError(f"max_retries must be >= 0, got {max_retries}")
    txn = Transaction(read_version or 0, str(uuidlib.uuid4()), operation, tag,
                      dict(transaction_properties or {}))
    att = _Attempt(store, handler_for(manifest_store, store), txn, checked=txn.read_version,
                   hints=rebase_hints or {}, manifests=dict(known_manifests or {}),
                   expected_latest=expected_latest)
    att.handler.check_store(store)  # e.g. no conditional put and no external store: refuse up front
    options = BuildOptions(stable_row_ids=enable_stable_row_ids, data_storage_version=data_storage_version)
    default_scheme = ManifestNamingScheme.V2 if enable_v2_manifest_paths else ManifestNamingScheme.V1
    started = time.monotonic()
    unit = 0.0
    try:
        for attempt in range(max_retries + 1):
            result = _attempt(att, options, default_scheme, must_create)
            if result is not None:
                return result
            if attempt == 0:
                unit = max(0.005, (time.monotonic() - started) * 1.1)
            if attempt < max_retries:
                time.sleep(backoff_seconds(attempt, unit))
    except CommitStateUnknown:
        raise
    except BaseException:
        if not att.unknown:
            att.cleanup()
        raise
    att.cleanup()
    if att.refused is not None:  # a known failure: the last put stored nothing
        raise CommitError(f"the store refused the commit's put (last of {max_retries + 1} attempts): "
                          f"{att.refused.message}", path=att.refused.path) from att.refused
    raise CommitConflict(f"lost the race for the next version {max_retries + 1} times; retry later",
                         path=store.uri(""))


def _attempt(att: _Attempt, options: BuildOptions, default_scheme: ManifestNamingScheme,
             must_create: bool) -> CommitResult | None:
    """One attempt: the landed commit, or None when another writer took the version first."""
    store = att.store
    # the versions since the last check (first attempt with a version expected latest: that one)
    listing = _expected_listing(att) or att.handler.recent_versions(store, att.checked)
    latest = listing.latest
    previous: ManifestFile | None = None
    if latest is None:
        if att.txn.read_version != 0:
            raise NotFoundError(f"no dataset here to commit on top of version {att.txn.read_version}",
                                path=store.uri(""))
    else:
        if must_create:
            raise IncompatibleTransaction("the dataset already exists", path=store.uri(""))
        if att.txn.read_version > latest:
            raise NotFoundError(f"read version {att.txn.read_version} is newer than the latest version "
                                f"{latest}",
                                path=store.uri(""))
        previous = att.manifest_file(latest, listing)
        if previous is None:
            raise NotFoundError(f"version {latest} vanished while committing", path=store.uri(""))
        check_writable(previous.manifest.writer_feature_flags, previous.path)
        if latest > att.checked:
            mine = _check_new_versions(att, listing, latest)
            if mine is not None:  # an earlier attempt's put landed after all
                return _landed_earlier(att, mine, listing)
    version = (latest or 0) + 1
    scheme = listing.scheme or default_scheme
    data, txn_name, built = _build(att, previous, listing, options)
    txn_bytes = built.transaction_bytes
    if txn_name is None or txn_bytes is None or att.txn_files.get(txn_name) == txn_bytes:
        return _put(att, version, scheme, data, built, txn_name)
    # The transaction file goes out beside the manifest's put (one round trip a commit, not
    # two): the manifest carries the same bytes inline, which is where pylance 14 (Lance since
    # 0.40) and this library read a version's transaction. Recorded first, so a failed commit
    # deletes it. Older releases read the file: LSO_TRANSACTION_FILE_FIRST=1 writes it first.
    att.txn_files[txn_name] = txn_bytes
    rel = f"{TRANSACTIONS_DIR}/{txn_name}"
    if transaction_file_first():
        att.store.write(rel, txn_bytes)
        return _put(att, version, scheme, data, built, txn_name)
    with beside(att.store.write, rel, txn_bytes, name="lso-txn") as txn_put:
        result = _put(att, version, scheme, data, built, txn_name)  # an error: raised once it is done
    error = txn_put.exception()
    if error is None:
        return result
    if result is None:  # nothing landed and the transaction file failed: the commit fails, as before
        raise error
    try:  # landed: the file is the record older Lance releases read; one more try
        att.store.write(rel, txn_bytes)
    except Exception as again:  # noqa: BLE001 - the version is committed; its transaction is inline
        logger.warning("version %d is committed, but its transaction file %s was not written (%r); "
                       "its manifest holds the same transaction", result.version, store.uri(rel), again)
    return result


def transaction_file_first() -> bool:
    """``LSO_TRANSACTION_FILE_FIRST=1`` (the committing process's environment): write each
    transaction file before its manifest, as Lance does, for tables that writers older than
    Lance 0.40 commit to concurrently (they read a version's transaction from its file)."""
    return os.environ.get("LSO_TRANSACTION_FILE_FIRST", "").strip().lower() in ("1", "true", "yes")


def _put(att: _Attempt, version: int, scheme: ManifestNamingScheme, data: bytes, built: ManifestFile,
         txn_name: str | None) -> CommitResult | None:
    """Put manifest ``version``: the landed commit, or None when another writer took it first
    or the store refused the put."""
    store = att.store
    att.refused = None
    try:
        rel = att.handler.commit(store, version, scheme, data)
    except CommitConflict:
        return None
    except WriteRefused as e:
        # The store turned this put away (S3 503 SlowDown): it stored nothing, so it is retried
        # after the backoff like a lost race. A retry of the client before it may still have
        # landed: read back now, and later attempts know our transaction by its uuid.
        if att.handler.landed(store, version, scheme, data):
            return _landed(att, built, scheme.manifest_path(version), scheme, txn_name, data)
        att.refused = e
        return None
    except Exception as e:  # noqa: BLE001 - decide whether it landed
        landed = att.handler.landed(store, version, scheme, data)
        if landed is None:
            raise CommitStateUnknown(f"committing version {version} failed with {e!r}; it may have landed",
                                     path=store.uri(scheme.manifest_path(version))) from e
        if not landed:
            raise CommitError(f"committing version {version} failed: {e!r}",
                              path=store.uri(scheme.manifest_path(version))) from e
        rel = scheme.manifest_path(version)
    except BaseException:
        # Interrupted (KeyboardInterrupt, SystemExit ...): keep our files unless surely not landed.
        att.unknown = att.handler.landed(store, version, scheme, data) is not False
        raise
    return _landed(att, built, rel, scheme, txn_name, data)


def _expected_listing(att: _Attempt) -> VersionListing | None:
    """A listing of ``att.expected_latest`` alone (then forgotten: first attempt only) when the
    next version can be put on its word: the default handler (an atomic create-if-absent, so a
    version taken meanwhile makes the put fail, and versions have no gaps) and every version
    since the last check already parsed. None: list as usual."""
    version, att.expected_latest = att.expected_latest, None
    if version is None or version < att.checked or not isinstance(att.handler, PutIfNotExistsCommitHandler) \
            or not att.store.conditional_put:
        return None
    if any(v not in att.manifests for v in range(att.checked + 1, version + 1)):
        return None
    path = att.manifests[version].path if version in att.manifests else None
    if not path:
        return None
    scheme, names = scan_versions([path.rstrip("/").rsplit("/", 1)[-1]])
    if scheme is None or version not in names:
        return None
    return VersionListing(scheme, {version: f"{VERSIONS_DIR}/{names[version]}"}, complete=False)


def _build(att: _Attempt, previous: ManifestFile | None, listing: VersionListing,
           options: BuildOptions) -> tuple[bytes, str | None, ManifestFile]:
    """Manifest file bytes for the next version (and what they hold, so that a landed commit
    need not parse them again) and the name of its transaction file (None: not written)."""
    restored = None
    if isinstance(att.txn.operation, Restore):
        restored = att.manifest_file(att.txn.operation.version, listing)
        if restored is None:
            raise NotFoundError(f"cannot restore version {att.txn.operation.version}: it does not exist",
                                path=att.store.uri(""))
    indices = list(previous.index_section.indices) if previous is not None and previous.index_section else []
    if previous is not None and isinstance(att.txn.operation, REWRITES):
        # the one check every rewrite passes: never commit over a manifest that contradicts itself
        check_before_rewrite(previous.manifest, f"{type(att.txn.operation).__name__} commit",
                             att.store.uri(""), indices, deep=False)
    indices = trusted_indices(att.store, previous.manifest if previous is not None else None, indices,
                              att.store.uri(""))
    flags = previous.manifest.writer_feature_flags if previous is not None else 0
    disabled = bool(flags & FLAG_DISABLE_TRANSACTION_FILE)
    txn_name = None if disabled else att.txn.file_name
    manifest, new_indices = build_manifest(
        previous.manifest if previous is not None else None, indices, att.txn, txn_name, options,
        restored.manifest if restored is not None else None,
        list(restored.index_section.indices) if restored is not None and restored.index_section else None)
    repair_manifest(att.store, manifest, att.store.uri(""),
                    reserving=isinstance(att.txn.operation, ReserveFragments),
                    recount=previous is not None and previous.manifest.writer_version is None)
    mixed = [f for f in _storage_findings(manifest) if f.check == "mixed_file_versions"]
    if mixed:  # Lance's check_storage_version, on every commit
        raise InconsistentDatasetError(f"{mixed[0].detail}", path=att.store.uri(""))
    txn_bytes = att.txn.to_bytes()
    section = index_section(new_indices)
    data = serialize_manifest_file(manifest, txn_bytes, section)
    built = ManifestFile(manifest, txn_bytes, section.SerializeToString() if section is not None else None)
    return data, txn_name, built


def _storage_findings(manifest: Any) -> list[Finding]:
    """Findings of a manifest about to be written, legacy (0.1) datasets only: the files of
    a 2.x dataset are checked against its version where they are read."""
    if manifest.data_storage_version != "0.1":
        return []
    return manifest_findings(manifest, deep=False)


def _landed(att: _Attempt, built: ManifestFile, rel: str, scheme: ManifestNamingScheme,
            txn_name: str | None, data: bytes | None = None) -> CommitResult:
    store = att.store
    mf = replace(built, path=store.uri(rel))  # what the bytes written hold, without parsing them again
    _write_hint(store, mf.manifest.version)
    keep = {p for p in att.rebase_files if _referenced(att.txn, p)}
    try:
        att.cleanup(keep_txn=txn_name, keep_files=keep)
    except Exception:  # noqa: BLE001 - leftovers are harmless; the commit landed
        pass
    return CommitResult(store, mf, scheme, rel.rsplit("/", 1)[-1], att.handler, data)


def _referenced(txn: Transaction, rel: str) -> bool:
    """Whether the committed operation names the deletion file ``rel`` (a rebase wrote it)."""
    op = txn.operation
    frags = list(getattr(op, "updated_fragments", []))
    if isinstance(op, Rewrite):
        frags += [f for g in op.all_groups() for f in g.new_fragments]
    return any(f.deletion_file is not None and deletion_file_path(f.id, f.deletion_file) == rel
               for f in frags)
