"""The process's one cache (``lance_spark_ops.cache``): least recently used out first over every
region within one byte budget, each region's own caps, the budget a job hands its tasks."""

from __future__ import annotations

import threading

from lance_spark_ops.cache import CacheOwner, process_cache


def test_lru_over_all_regions_within_the_budget() -> None:
    owner = CacheOwner(100)
    a, b = owner.region("a"), owner.region("b")
    a.put(1, "a1", 40)
    b.put(1, "b1", 40)
    assert a.get(1) == "a1"  # a1 is now the most recently used
    b.put(2, "b2", 40)  # 120 > 100: the least recently used entry (b1) leaves, in another region
    assert (a.get(1), b.get(1), b.get(2)) == ("a1", None, "b2")
    assert owner.used == 80 and owner.stats() == {"a": (1, 40), "b": (1, 40)}
    owner.configure(50)  # a smaller budget evicts now: a1 is older than b2
    assert (a.get(1), b.get(2)) == (None, "b2") and owner.used == 40


def test_region_caps() -> None:
    owner = CacheOwner(1 << 20)
    few = owner.region("few", max_entries=2)
    for k in range(3):
        few.put(k, k, 1)
    assert list(few) == [1, 2]
    small = owner.region("small", max_entry_bytes=10)
    small.put("big", 1, 11)
    small.put("fits", 2, 10)
    assert "big" not in small and small.get("fits") == 2
    capped = owner.region("capped", max_bytes=100)
    capped.put(1, 1, 60)
    capped.put(2, 2, 60)  # over the region's bytes: the older leaves
    assert list(capped) == [2]
    capped.put(3, 3, 500)  # alone over the cap: kept (a region keeps its newest entry)
    assert list(capped) == [3] and capped.bytes == 500
    capped.put(3, 4, 20)  # replaced: its old size no longer counted
    assert capped.get(3) == 4 and capped.bytes == 20
    assert capped.pop(3) == 4 and capped.bytes == 0 and owner.used == 1 * 2 + 10


def test_values_that_are_none_like_and_clear() -> None:
    owner = CacheOwner(1000)
    r = owner.region("r")
    r.put("f", False, 1)
    assert r.get("f") is False and r.get("missing", "d") == "d"
    r.clear()
    assert len(r) == 0 and owner.used == 0


def test_threads_share_one_budget() -> None:
    owner = CacheOwner(10_000)
    r = owner.region("t")

    def work(base: int) -> None:
        for i in range(2000):
            r.put((base, i), i, 7)
            r.get((base, i // 2))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert owner.used == r.bytes == 7 * len(r) <= 10_000


def test_a_job_hands_its_budget_to_its_tasks() -> None:
    from lance_spark_ops.spark.runtime.job import Job
    from lance_spark_ops.spark.runtime.tuning import Tuning

    def task(x: int, ctx: object) -> tuple[int | None, int]:
        return ctx.cache_bytes, process_cache().budget  # type: ignore[attr-defined]

    before = process_cache().budget
    try:
        with Job(None, "test_cache", "memory://x", tuning=Tuning(cache_bytes=123_456)) as job:
            assert job.run_tasks([1, 2], task) == [(123_456, 123_456)] * 2
        with Job(None, "test_cache", "memory://x") as job:  # no budget given: the process's stays
            assert job.run_tasks([1], task) == [(None, 123_456)]
    finally:
        process_cache().configure(before)


def test_no_module_level_lru_of_its_own() -> None:
    """Module-level memos are regions of the one owner: no module keeps its own ``OrderedDict``
    (the shape every old per-module LRU had)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "lance_spark_ops"
    found = []
    for path in root.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "OrderedDict":
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found
