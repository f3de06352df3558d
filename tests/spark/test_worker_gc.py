"""Workers keep their imported modules out of the per-task full collection (``worker_gc``)."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator

import pytest

from lance_spark_ops.spark.runtime import worker_gc
from lance_spark_ops.spark.runtime.runner import TaskContext, run_tasks


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """This test process's permanent generation is emptied before and after (a frozen test
    process would never collect the cycles its other tests leave)."""
    gc.unfreeze()
    before = worker_gc._modules_at_freeze
    yield
    gc.unfreeze()
    worker_gc._modules_at_freeze = before


def test_freezes_once_per_batch_of_imports(unfrozen: None) -> None:
    worker_gc._modules_at_freeze = -1
    assert worker_gc.freeze_imported()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # this process's modules, functions and classes
    assert not worker_gc.freeze_imported()  # nothing imported since: nothing new frozen
    # Frozen objects are still freed by reference count (see the next test), so the count may
    # drop while other threads (py4j, Spark) let go of objects; it never grows without a freeze.
    assert gc.get_freeze_count() <= frozen
    sys.modules["lso_probe_module"] = types.ModuleType("lso_probe_module")
    try:
        assert worker_gc.freeze_imported()
    finally:
        del sys.modules["lso_probe_module"]


def test_frozen_objects_are_still_freed_by_reference_count(unfrozen: None) -> None:
    import weakref

    class Box:
        pass

    box = Box()
    ref = weakref.ref(box)
    worker_gc._modules_at_freeze = -1
    assert worker_gc.freeze_imported()
    del box
    assert ref() is None


def _worker_gc_state(task: int, ctx: TaskContext) -> tuple[int, int, bool]:
    import gc
    import os

    return os.getpid(), gc.get_freeze_count(), "numpy" in sys.modules


@pytest.mark.spark
def test_spark_workers_run_tasks_with_their_modules_frozen(spark) -> None:
    """Through the daemon and the mapper, a worker's modules (numpy, pyarrow, pyspark, this
    package) are frozen when a task runs, so the daemon's gc.collect() after it skips them."""
    out = run_tasks(spark, "jobGC", [0, 1, 2, 3], _worker_gc_state)
    for _, (_, frozen, has_numpy) in out.values():
        assert has_numpy
        assert frozen > 20_000, frozen
