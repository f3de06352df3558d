"""Manifest feature flags (``reader_feature_flags`` / ``writer_feature_flags``).

The table format says: a reader that meets a reader flag it does not know, or a writer that
meets a writer flag it does not know, must fail every read / write with an "unsupported"
error. Known bits (Lance ``feature_flags.rs``):

====  ===========================  =================================================
bit   name                         meaning
====  ===========================  =================================================
1     DELETION_FILES               fragments may have deletion files
2     STABLE_ROW_IDS               fragments carry row-id sequences
4     USE_V2_FORMAT_DEPRECATED     old marker for 2.0 data files (ignored)
8     TABLE_CONFIG                 ``config`` is set (writer flag only)
16    BASE_PATHS                   files may live under other base paths
32    DISABLE_TRANSACTION_FILE     only the inline transaction is written
====  ===========================  =================================================

Anything from 64 up is unknown. pylance 14 sets 0 for a fresh table, 1 once deletion files
exist, 2 with stable row ids, 3 with both.
"""

from __future__ import annotations

from lance_spark_ops.errors import UnsupportedError

FLAG_DELETION_FILES = 1
FLAG_STABLE_ROW_IDS = 2
FLAG_USE_V2_FORMAT_DEPRECATED = 4
FLAG_TABLE_CONFIG = 8
FLAG_BASE_PATHS = 16
FLAG_DISABLE_TRANSACTION_FILE = 32
FLAG_UNKNOWN = 64

KNOWN_FLAGS = {
    FLAG_DELETION_FILES: "deletion_files",
    FLAG_STABLE_ROW_IDS: "stable_row_ids",
    FLAG_USE_V2_FORMAT_DEPRECATED: "use_v2_format_deprecated",
    FLAG_TABLE_CONFIG: "table_config",
    FLAG_BASE_PATHS: "base_paths",
    FLAG_DISABLE_TRANSACTION_FILE: "disable_transaction_file",
}
KNOWN_MASK = FLAG_UNKNOWN - 1


def flag_names(flags: int) -> list[str]:
    """Names of the set bits; unknown bits as ``bit<N>``."""
    out = []
    for bit in range(64):
        v = 1 << bit
        if flags & v:
            out.append(KNOWN_FLAGS.get(v, f"bit{bit}"))
    return out


def _check(flags: int, kind: str, path: str | None) -> None:
    unknown = flags & ~KNOWN_MASK
    if unknown:
        raise UnsupportedError(
            f"{kind} feature flags {flags:#x} include unknown bits {unknown:#x} "
            f"({', '.join(flag_names(unknown))}); known: {KNOWN_MASK:#x}", path=path)


def check_readable(reader_flags: int, path: str | None = None) -> None:
    """Raise UnsupportedError when ``reader_flags`` has a bit this library does not know."""
    _check(reader_flags, "reader", path)


def check_writable(writer_flags: int, path: str | None = None) -> None:
    """Raise UnsupportedError when ``writer_flags`` has a bit this library does not know."""
    _check(writer_flags, "writer", path)


def compute_flags(*, has_deletion_files: bool, stable_row_ids: bool, has_config: bool = False,
                  has_base_paths: bool = False, disable_transaction_file: bool = False) -> tuple[int, int]:
    """(reader, writer) flags for a new manifest, as Lance's ``apply_feature_flags`` sets them."""
    reader = writer = 0
    if has_deletion_files:
        reader |= FLAG_DELETION_FILES
        writer |= FLAG_DELETION_FILES
    if stable_row_ids:
        reader |= FLAG_STABLE_ROW_IDS
        writer |= FLAG_STABLE_ROW_IDS
    if has_config:
        writer |= FLAG_TABLE_CONFIG
    if has_base_paths:
        reader |= FLAG_BASE_PATHS
        writer |= FLAG_BASE_PATHS
    if disable_transaction_file:
        writer |= FLAG_DISABLE_TRANSACTION_FILE
    return reader, writer
