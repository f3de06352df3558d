"""``_heap``: a task's freed C heap is kept for the process's next task up to a bound, and
handed back to the OS beyond it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from lance_spark_ops import _heap


class _Lib:
    def __init__(self) -> None:
        self.trims: list[int] = []

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


@pytest.mark.parametrize(("free", "trimmed"), [(100, False), (300, True), (None, True)])
def test_release_keeps_at_most_its_bound(monkeypatch: pytest.MonkeyPatch, free: int | None,
                                         trimmed: bool) -> None:
    lib = _Lib()
    monkeypatch.setattr(_heap, "_glibc", lambda: lib)
    monkeypatch.setattr(_heap, "free_heap_bytes", lambda: free)
    assert _heap.release_freed_memory(keep=200) is trimmed
    assert lib.trims == ([0] if trimmed else [])  # None: glibc cannot tell, so it is handed back


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallinfo2")
def test_mallinfo2_fields_read_in_their_order() -> None:
    """The struct binding reads glibc's fields in order: the heap's bytes from the system are
    the bytes in use plus the free ones (one snapshot), and ``free_heap_bytes`` is the latter."""
    info = _heap._mallinfo2()  # noqa: SLF001
    if info is None:
        pytest.skip("not glibc >= 2.33")
    keep = np.ones(1 << 20, dtype=np.uint8)  # something in use from the heap
    info = _heap._mallinfo2()  # noqa: SLF001
    assert info is not None and info.arena == info.uordblks + info.fordblks and info.uordblks > 0
    free = _heap.free_heap_bytes()
    assert isinstance(free, int) and free >= 0
    assert keep.sum() == 1 << 20
