"""How much I/O one task keeps in flight: requests and bytes.

On an object store each request costs a round trip (10-50 ms first byte) and little CPU, so a
task hides latency by keeping many requests in flight; on a local disk a read is a syscall
served from the page cache or the device queue, and concurrency only adds overhead. The
budget is per ``ObjectStore`` (one per task and dataset), so an executor with C cores running
C tasks has up to C x ``max_requests`` requests and C x ``max_bytes`` bytes in flight.

Knobs (environment variables, read when a store is made; on a cluster set them on executors
with ``spark.executorEnv.LSO_IO_MAX_REQUESTS`` ...):

- ``LSO_IO_MAX_REQUESTS``: requests in flight per task (object stores: 32; local: 1)
- ``LSO_IO_MAX_BYTES``: bytes in flight or fetched ahead and not yet consumed, per task
  (object stores: 64 MiB; local: 32 MiB). One budget bounds what a rewrite task holds of its
  I/O: its output's upload holds up to ``upload_share`` (half: the parts in flight and the part
  being filled; 5 parts of 5 MiB in flight by default) and the prefetch of its next files the rest
  (``prefetch_share``; files the task is done with are dropped at once, files it is reading are
  kept); once the task has read its last input (the prefetch stopped), the upload may hold the
  whole budget, so the parts left at the writer's close go out together. Its file writer
  buffers up to ``writer_share`` of Arrow data for its next pages besides (half of the
  budget, at most 8 MiB, shared by all columns, at least ``WRITER_COLUMN_FLOOR`` each:
  ``file.writer``), so a task of up to 32 columns holds at most the budget plus 8 MiB. Raise it
  where the store takes parts slowly and memory is plentiful (more parts in flight); lower it
  on small executors: at 16 MiB a task's peak RSS hardly grows with its fragment count (231 /
  244 / 243 MiB at 50 / 500 / 1 000 fragments, against 64 MiB's ~300 / ~365), at the cost of
  large outputs' uploads (one 5 MiB part in flight: a 60 MB compaction at 20 ms took 2.2x the
  time, ``bench/rewrite_rss_profile.py``, ``bench/object_store_bench.py``).
- ``LSO_IO_PART_BYTES``: part size of concurrent multipart uploads and of ranged reads of a
  large object (5 MiB, S3's smallest part; S3 needs >= 5 MiB). S3 carries ~90 MB/s on one
  connection, so a part's bytes take as long as its round trip or longer: within the upload's
  byte share smaller parts keep more connections busy. At 20 ms and 90 MB/s a connection, a
  60 MB compaction's upload had 2 parts of 8 MiB in flight (0.82-0.84 s) against 4 of 5 MiB
  (0.66-0.68 s; 0.63-0.67 against 0.60 s with no bandwidth cap: ``bench/object_store_bench.py
  --bandwidth-mbps``). Smaller parts also start uploading sooner while the writer encodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lance_spark_ops.errors import InvalidInputError

MIB = 1 << 20
MIN_PART_BYTES = 5 * MIB  # S3's smallest part (but the last)


@dataclass(frozen=True)
class IOBudget:
    """Requests and bytes one task keeps in flight (see the module docstring)."""

    max_requests: int
    max_bytes: int
    part_bytes: int = MIN_PART_BYTES  # see the module docstring (LSO_IO_PART_BYTES)

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_bytes < 1:
            raise InvalidInputError(f"I/O budget must be positive: {self}")
        if self.part_bytes < MIN_PART_BYTES:
            raise InvalidInputError(f"LSO_IO_PART_BYTES must be at least 5 MiB (S3's smallest part), "
                                    f"got {self.part_bytes}")


def upload_share(budget: IOBudget) -> int:
    """Bytes an open multipart upload may hold (parts in flight and the part being filled; the
    HTTP client's copy of a part while it is sent is not counted): half the byte budget, at
    least one part in flight."""
    return max(2 * budget.part_bytes, budget.max_bytes // 2)


def upload_window(budget: IOBudget, whole: bool = False) -> int:
    """Parts of one upload in flight at once: ``upload_share`` less the part being filled, or
    (``whole``: nothing is fetched ahead any more, at the end of a task's reading) the whole
    byte budget less that part."""
    part = budget.part_bytes
    share = max(2 * part, budget.max_bytes) if whole else upload_share(budget)
    return max(1, min(budget.max_requests, (share - part) // part))


# what a writer buffers at most, all columns together: a page's worth (``file.writer``'s
# ``DEFAULT_PAGE_BYTES``). Half of a 64 MiB budget let the buffers grow with a task's rows up to
# 32 MiB (with their encoded copies): most of a rewrite task's RSS growth from 50 to 500
# fragments (295 -> 363 MiB; 284 -> 307 with this cap), at no measured cost in speed
# (``bench/rewrite_rss_profile.py``, ``object_store_bench.py --ops compact``, ``compact_bench.py``)
WRITER_SHARE_MAX = 8 * MIB


def writer_share(budget: IOBudget) -> int:
    """Arrow bytes a file writer buffers for its next pages, all columns together: half of
    the byte budget, at most ``WRITER_SHARE_MAX`` (``file.writer`` flushes its largest
    column's page beyond it). A writer of many columns still gives each
    ``WRITER_COLUMN_FLOOR``: pages stay a useful size."""
    return min(budget.max_bytes // 2, WRITER_SHARE_MAX)


# each column of a writer may buffer this much before its share makes it flush (a table of
# more than writer_share / 256 KiB columns buffers columns x 256 KiB: 32 columns at 8 MiB)
WRITER_COLUMN_FLOOR = 256 * 1024


def prefetch_share(budget: IOBudget) -> int:
    """Bytes a task's prefetch holds: what the upload leaves of the budget. The writer's share
    is not taken from it: a prefetch of 16 or 24 MiB instead of 32 made a 48-fragment
    compaction at 20 ms read most of its files directly (97 GETs became 236 / 172; 0.68x
    pylance became 2.57x / 1.60x, ``bench/object_store_bench.py --ops compact``)."""
    return max(1, budget.max_bytes - upload_share(budget))


OBJECT_STORE_BUDGET = IOBudget(max_requests=32, max_bytes=64 * MIB)
LOCAL_BUDGET = IOBudget(max_requests=1, max_bytes=32 * MIB)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidInputError(f"environment variable {name} must be an integer, got {raw!r}") from None


def io_budget(local: bool) -> IOBudget:
    """The budget for a local store or an object store, with the environment's overrides."""
    base = LOCAL_BUDGET if local else OBJECT_STORE_BUDGET
    max_bytes = _env_int("LSO_IO_MAX_BYTES", base.max_bytes)
    return IOBudget(_env_int("LSO_IO_MAX_REQUESTS", base.max_requests), max_bytes,
                    _env_int("LSO_IO_PART_BYTES", base.part_bytes))
