"""A rewrite task over many tiny fragments holds a bounded number of them at once
(``Tuning.fragment_chunk``): its peak traced allocation must not grow with the
fragment count,
and its files must be the bytes a task taking up every fragment at once writes."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.file.tuning import FileTuning
from lance_spark_ops.spark.files import rewrite_tasks as rewrite
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.tuning import DEFAULT_TUNING
from lance_spark_ops.table.dataset import Dataset
from tests.spark.datasets import data_file_names, new_file_hashes

ROWS = 5


def _tiny_fragments(uri: str, fragments: int, stable: bool) -> None:
    import lance

    n = fragments * ROWS
    lance.write_dataset(pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                                  "x": pa.array(np.random.default_rng(3).random(n))}),
                        uri, data_storage_version="2.2", max_rows_per_file=ROWS, max_rows_per_group=ROWS,
                        enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id % 7 = 2")  # deletion files on most fragments


def _task(uri: str, job: str, sliced: bool = True,
          **tuning: object) -> tuple[rewrite.RewriteSpec, TaskContext]:
    """A task rewriting every fragment of ``uri``, with its manifest slice as the driver makes it
    (``tuning``: the spec's tuning fields, as a job's ``Tuning`` sets them)."""
    ds = Dataset.open(uri)
    ids = tuple(ds.manifest.fragment_columns().id.tolist())
    chunk = tuning.get("fragment_chunk", DEFAULT_TUNING.fragment_chunk)
    slc = ds.fragment_slice(ids, chunk) if sliced else None
    spec = rewrite.RewriteSpec(uri, ds.version, ids, "2.2", 10**9, manifest_slice=slc, **tuning)
    return spec, TaskContext(job, 0, "0")


def _peak(uri: str, job: str, **tuning: object) -> tuple[int, rewrite.RewriteResult]:
    """Peak traced bytes of a rewrite of every fragment of ``uri``, opening the dataset included."""
    spec, ctx = _task(uri, job, **tuning)
    rewrite._OPENED.clear()  # noqa: SLF001
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = rewrite.run_rewrite(spec, ctx)
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


def _peaks(small: str, large: str) -> tuple[int, int, int, int]:
    """Peak traced bytes and rows written of a rewrite of ``small`` and of ``large``, every bound
    on what a task holds scaled down from thousands to 16 (fragments taken up, fragments read
    together, buffered chunks before a merge, checked paths remembered)."""
    bounds = {"fragment_chunk": 16, "run_fragments": 16, "paths_kept": 16,
              "file_tuning": FileTuning(merge_chunks=16)}
    _peak(small, "warm", **bounds)  # module caches (parsed schemas, twin files) filled
    p1, r1 = _peak(small, "small", **bounds)
    p4, r4 = _peak(large, "large", **bounds)
    return p1, p4, r1.rows_written, r4.rows_written


@pytest.mark.parametrize("stable", [False, True])
def test_peak_memory_flat_in_fragment_count(tmp_path: Path, stable: bool) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import lance

    small, large = str(tmp_path / "small"), str(tmp_path / "large")
    _tiny_fragments(small, 150, stable)
    _tiny_fragments(large, 600, stable)
    # measured in a fresh process: tracemalloc counts every thread's allocations, and threads
    # earlier tests leave behind (fsspec's event loop, emulator clients) allocate at any time
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        p1, p4, r1, r4 = pool.submit(_peaks, small, large).result(timeout=600)
    assert (r1, r4) == (lance.dataset(small).count_rows(), lance.dataset(large).count_rows())
    # ~2.5 KB per fragment held when a task took up all of its fragments at once: 450 more
    # fragments were > 1 MB more
    assert p4 - p1 < 200_000, (p1, p4)


def test_chunks_write_the_bytes_of_one_pass(tmp_path: Path) -> None:
    """Fragments taken up 7 at a time, the writer's buffered chunks merged every 3: the files
    and row ids of one pass over all fragments with nothing merged."""
    import lance

    uri = str(tmp_path / "src")
    _tiny_fragments(uri, 300, True)
    names = data_file_names(uri)
    one = rewrite.run_rewrite(*_task(uri, "one", fragment_chunk=10**9,
                                     file_tuning=FileTuning(merge_chunks=10**9)))
    hashes_one = new_file_hashes(uri, names)
    names2 = data_file_names(uri)
    chunked = rewrite.run_rewrite(*_task(uri, "chunked", fragment_chunk=7,
                                         file_tuning=FileTuning(merge_chunks=3)))
    assert new_file_hashes(uri, names2) == hashes_one
    assert [f.row_id_meta for f in chunked.new_fragments] == [f.row_id_meta for f in one.new_fragments]
    assert [f.created_at_version_meta for f in chunked.new_fragments] == \
        [f.created_at_version_meta for f in one.new_fragments]
    assert chunked.rows_written == one.rows_written == lance.dataset(uri).count_rows()


def test_a_sliced_task_reads_only_its_fragments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With its manifest slice a task never opens the whole manifest, and writes what a task
    that does writes; a slice that does not match the file is a typed error or, for the
    manifest's other fields, the whole manifest read instead."""
    import dataclasses

    import lance

    from lance_spark_ops.errors import CorruptFileError

    uri = str(tmp_path / "src")
    _tiny_fragments(uri, 120, True)
    names = data_file_names(uri)
    whole, ctx = _task(uri, "whole", sliced=False, fragment_chunk=16)
    one = rewrite.run_rewrite(whole, ctx)
    hashes = new_file_hashes(uri, names)

    sliced, ctx = _task(uri, "sliced", fragment_chunk=16)
    assert len(sliced.manifest_slice.chunks) == 8  # 120 neighbours, 16 at a time
    opened: list[str] = []
    real_open = Dataset.open.__func__
    monkeypatch.setattr(Dataset, "open", classmethod(lambda cls, *a, **k: opened.append(a[0]) or
                                                     real_open(cls, *a, **k)))
    names2 = data_file_names(uri)
    got = rewrite.run_rewrite(sliced, ctx)
    assert not opened
    assert new_file_hashes(uri, names2) == hashes
    assert [f.row_id_meta for f in got.new_fragments] == [f.row_id_meta for f in one.new_fragments]
    assert got.rows_written == lance.dataset(uri).count_rows() == one.rows_written

    # a chunk whose range holds other fragments: refused, naming the manifest file
    (off, length, n), *rest = sliced.manifest_slice.chunks
    moved = dataclasses.replace(sliced.manifest_slice, chunks=((off + 1, length, n), *rest))
    with pytest.raises(CorruptFileError, match="manifest"):
        rewrite.run_rewrite(dataclasses.replace(sliced, manifest_slice=moved), TaskContext("moved", 0, "0"))
    # a head that is not the file's: the whole manifest is read
    (a, la), tail = moved.head
    other = dataclasses.replace(sliced.manifest_slice, head=((a, la - 1), tail))
    names3 = data_file_names(uri)
    rewrite.run_rewrite(dataclasses.replace(sliced, manifest_slice=other), TaskContext("other", 0, "0"))
    assert opened and new_file_hashes(uri, names3) == hashes


def _vector_fragments(uri: str, fragments: int, rows: int = 2_000) -> pa.Table:
    import lance

    n = fragments * rows
    rng = np.random.default_rng(fragments)
    t = pa.table({"id": np.arange(n, dtype=np.int64), "x": rng.standard_normal(n),
                  "v": pa.FixedSizeListArray.from_arrays(
                      pa.array(rng.standard_normal(8 * n, dtype=np.float32)), 8)})
    lance.write_dataset(t, uri, max_rows_per_file=rows, data_storage_version="2.1")
    return t


def _arrow_peak(uri: str) -> tuple[int, str]:
    """Arrow's peak allocation (bytes, counted by a proxy pool) of a rewrite of every fragment of
    ``uri`` under a 4 MiB byte budget, and its file."""
    import os

    os.environ["LSO_IO_MAX_BYTES"] = str(4 << 20)  # writer share 1 MiB (this spawned process only)
    spec, ctx = _task(uri, "arrow", batch_rows=8192)
    spec = rewrite.RewriteSpec(**{**spec.__dict__, "file_version": "2.1"})
    rewrite._OPENED.clear()  # noqa: SLF001
    before = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(before)
    pa.set_memory_pool(pool)
    try:
        result = rewrite.run_rewrite(spec, ctx)
    finally:
        pa.set_memory_pool(before)
    return pool.max_memory(), result.files[0]


def test_arrow_peak_flat_in_fragment_count(tmp_path: Path) -> None:
    """A rewrite of 10x the fragments (10x the rows of one output file) allocates no more Arrow
    memory at its peak: the writer's buffered pages stay within its share of the task's byte
    budget (they grew to an 8 MiB page per column, whatever the budget). pylance reads the
    output's rows as the input's."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tests.conftest import pylance_read

    small, large = str(tmp_path / "small"), str(tmp_path / "large")
    tables = [_vector_fragments(small, 20), _vector_fragments(large, 200)]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        (p1, f1), (p10, f10) = (pool.submit(_arrow_peak, u).result(timeout=600) for u in (small, large))
    for uri, name, table in ((small, f1, tables[0]), (large, f10, tables[1])):
        assert pylance_read(f"{uri}/data/{name}").equals(table)
    # 2.6 / 17.2 MB before, 1.5 / 1.8-2.0 MB now (the decode thread's run ahead varies)
    assert p10 - p1 < 3 << 19, (p1, p10)
