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
def test_free_heap_bytes_sees_a_freed_array() -> None:
    if _heap._glibc() is None or _heap.free_heap_bytes() is None:  # noqa: SLF001
        pytest.skip("not glibc >= 2.33")
    assert _heap.retain_freed_memory()
    _heap.release_freed_memory(keep=0)
    before = _heap.free_heap_bytes()
    arr = np.ones(8 << 20, dtype=np.uint8)  # below the 32 MiB mmap threshold: from the heap
    del arr
    after = _heap.free_heap_bytes()
    assert before is not None and after is not None and after >= before + (8 << 20) - (1 << 20)
    assert _heap.release_freed_memory(keep=0)
