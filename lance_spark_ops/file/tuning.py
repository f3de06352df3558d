"""The writer's buffer and window sizes as one frozen value (issue #38): a writer takes it as
``tuning=`` (a job's ``Tuning.file``), so tests scale the bounds down by passing a value instead
of patching module globals. The defaults are what every production run uses."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_FILE_TUNING", "FileTuning"]


@dataclass(frozen=True)
class FileTuning:
    """Sizes of a ``LanceFileWriter``'s buffers and copy windows."""

    # chunks a field's buffer holds before it concatenates them (``_FieldBuffer.merge_tail``)
    merge_chunks: int = 256
    # a binary copy reads the pages it moves this many bytes at a time (coalesced requests)
    copy_window: int = 16 * 1024 * 1024
    # rows decoded at a time when a binary copy re-encodes a field whole or a run of pages
    reencode_rows: int = 64 * 1024


DEFAULT_FILE_TUNING = FileTuning()
