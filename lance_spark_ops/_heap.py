"""``retain_freed_memory``: keep the C heap's freed pages while a task decodes and encodes.

Decoding and encoding allocate numpy temporaries of 100 KB - 10 MB per page and per flush.
glibc serves them from fresh ``mmap``s or from heap top it trimmed back to the OS, so
every such array is page-faulted in again: re-encoding a list-heavy dataset took ~700 000
minor faults and a quarter of its CPU time in the kernel. With the mmap threshold fixed at
32 MiB and the trim threshold at 256 MiB freed pages are reused instead (80 000 faults).
``release_freed_memory`` at the end of a task hands the freed pages back to the OS only when
they are more than the trim threshold: the next task of the process reuses them (on a VM a
48-fragment compaction at 20 ms faulted 25 000 pages a task, ~0.25 s of system time, with
everything handed back; ~7 000 without). Outside glibc (macOS, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 256 << 20

_libc: ctypes.CDLL | None = None
_done = False


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            if all(hasattr(lib, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
                _libc = lib
        except OSError:
            return None
    return _libc


def retain_freed_memory() -> bool:
    """Set the thresholds once per process (True when they are in force)."""
    global _done
    if _done:
        return True
    lib = _glibc()
    if lib is None:
        return False
    _done = bool(lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        lib.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _mallinfo2() -> _MallInfo2 | None:
    """glibc's ``mallinfo2`` (None before glibc 2.33 or outside it)."""
    lib = _glibc()
    fn = getattr(lib, "mallinfo2", None) if lib is not None else None
    if fn is None:
        return None
    fn.restype = _MallInfo2
    return fn()


def free_heap_bytes() -> int | None:
    """Bytes the C heap holds freed, all arenas (``mallinfo2``'s ``fordblks``; None without it)."""
    info = _mallinfo2()
    return None if info is None else int(info.fordblks)


def release_freed_memory(keep: int = TRIM_THRESHOLD) -> bool:
    """Return the heap's free pages to the OS (``malloc_trim``) when it holds more than
    ``keep`` bytes of them (or cannot tell); True when it did."""
    lib = _glibc()
    if lib is None:
        return False
    free = free_heap_bytes()
    if free is not None and free <= keep:
        return False
    lib.malloc_trim(0)
    return True
