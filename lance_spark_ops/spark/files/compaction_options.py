"""Options of the compaction job, as pylance's ``CompactionOptions`` plus our own
(``dry_run``, ``commit_every``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lance_spark_ops.errors import InvalidInputError

COMPACTION_MODES = ("reencode", "try_binary_copy", "force_binary_copy")


@dataclass(frozen=True)
class CompactionOptions:
    """Options of ``compact`` (and of ``jobs/compact.py``, one flag each: the CLI's help is
    this table).

    Attributes:
        target_rows_per_fragment: rows per output fragment; fragments with fewer live rows are
            merged with their neighbours up to this.
        max_rows_per_group: accepted for parity with pylance; Lance 2.x files have no row
            groups, so (as in Lance) it changes nothing.
        max_bytes_per_file: start a new output fragment when a file would exceed this many bytes
            (none: no limit).
        materialize_deletions: also rewrite fragments whose deleted fraction is above
            materialize_deletions_threshold, even when they are large enough.
        materialize_deletions_threshold: deleted fraction (0 to 1) above which a fragment is
            rewritten to drop its deleted rows.
        compaction_mode: how rows move: reencode (decode and encode again), try_binary_copy
            (copy pages unchanged when the files allow it, else reencode) or force_binary_copy
            (fail if they do not).
        max_source_fragments: rewrite at most this many fragments in this run (task groups are
            kept oldest first until the next would exceed a limit; none: no limit).
        max_source_rows: rewrite fragments holding at most this many rows in total in this run.
        max_source_bytes: rewrite fragments holding at most this many bytes in total in this run.
        excluded_fragment_ids: fragment ids never rewritten (they split the plan like an index).
        data_storage_version: file version to write; must be the dataset's own (pylance 14
            cannot read a dataset mixing file versions) - none: the dataset's.
        defer_index_remap: leave index files as they are and cover the rewritten fragments with
            the fragment reuse index (pylance's defer_index_remap; refused with stable row ids),
            except IVF_HNSW_* indices meeting deleted rows, rebuilt in the same commit (pylance
            cannot read them through the FRI); default: remap every index in the same commit.
        dry_run: print and return the plan without writing or committing anything.
        commit_every: commit after every N task groups, so an interrupted job keeps its progress
            (none: one commit at the end).
        migrate_legacy: with data_storage_version 2.x on a legacy (0.1) dataset, rewrite every
            fragment into that version in one commit.
    """

    target_rows_per_fragment: int = 1024 * 1024
    # accepted for parity with pylance; Lance 2.x files have no row groups, so (as in Lance)
    # it changes nothing
    max_rows_per_group: int = 1024
    max_bytes_per_file: int | None = None
    materialize_deletions: bool = True
    materialize_deletions_threshold: float = 0.1
    compaction_mode: str = "reencode"
    max_source_fragments: int | None = None
    max_source_rows: int | None = None
    max_source_bytes: int | None = None
    excluded_fragment_ids: tuple[int, ...] = field(default_factory=tuple)
    # must be the dataset's own version: pylance 14 cannot read a dataset mixing file versions
    data_storage_version: str | None = None
    # as pylance: True leaves every index file alone and records the moves in the fragment reuse
    # index; False rewrites the indices it can (others are covered by the fragment reuse index)
    defer_index_remap: bool = False
    # ours: print and return the plan without changing anything
    dry_run: bool = False
    # ours: commit after every N task groups (partial progress); None = one commit at the end
    commit_every: int | None = None
    # ours: with a 2.x data_storage_version, move a legacy (0.1) dataset to that version by
    # rewriting every fragment in one commit (pylance reads no dataset mixing file versions)
    migrate_legacy: bool = False

    def __post_init__(self) -> None:
        if self.target_rows_per_fragment <= 0:
            raise InvalidInputError("target_rows_per_fragment must be positive")
        if self.compaction_mode not in COMPACTION_MODES:
            raise InvalidInputError(f"compaction_mode must be one of {COMPACTION_MODES}, got "
                                    f"{self.compaction_mode!r}")
        if not 0.0 <= self.materialize_deletions_threshold <= 1.0:
            raise InvalidInputError("materialize_deletions_threshold must be within [0, 1]")
        if self.commit_every is not None and self.commit_every <= 0:
            raise InvalidInputError("commit_every must be positive")
        object.__setattr__(self, "excluded_fragment_ids", tuple(self.excluded_fragment_ids or ()))

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> CompactionOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise InvalidInputError(f"unknown compaction option(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in kwargs.items() if v is not None})  # type: ignore[arg-type]

    @classmethod
    def resolve(cls, options: CompactionOptions | Mapping[str, Any] | None,
                overrides: Mapping[str, Any]) -> CompactionOptions:
        """``options`` (an instance, a mapping as pylance's ``CompactionOptions`` dict, or None)
        with ``overrides`` applied on top."""
        if options is None:
            base: dict[str, Any] = {}
        elif isinstance(options, CompactionOptions):
            base = {f.name: getattr(options, f.name) for f in fields(cls)}
        elif isinstance(options, Mapping):
            base = dict(options)
        else:
            raise InvalidInputError("options must be a CompactionOptions or a mapping, got "
                                    f"{type(options).__name__}")
        return cls.from_kwargs(**{**base, **overrides})
