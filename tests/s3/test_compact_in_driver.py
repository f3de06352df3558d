"""A one-task compaction on S3 run in the driver (``Tuning.driver_rewrite_bytes``), through the
latency proxy: requests counted (each data and deletion file one GET, no manifest slice read,
both commits put without a LIST, no sweep of
``data/``: at most pylance's count), and finished through injected 503s and connection resets
(a failed attempt retried in the driver); pylance reads the same rows every time."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.s3.conftest import SlowS3

ON = Tuning(driver_rewrite_bytes=1 << 30)


def _dataset(slow: SlowS3, name: str) -> tuple[str, pa.Table]:
    import lance

    ids = np.arange(16_000, dtype=np.int64)
    table = pa.table({"id": ids, "x": ids * 3, "s": pa.array([f"v{i % 97}" for i in ids.tolist()])})
    uri = slow.uri(name)
    so = slow.direct.options
    lance.write_dataset(table, uri, storage_options=so, max_rows_per_file=2_000, data_storage_version="2.1")
    lance.dataset(uri, storage_options=so).delete("id % 7 = 0")
    return uri, lance.dataset(uri, storage_options=so).to_table().sort_by("id")


def _after(slow: SlowS3, uri: str):
    import lance

    return lance.dataset(uri, storage_options=slow.direct.options)


def test_in_driver_requests_within_pylances(spark, slow_s3: SlowS3) -> None:
    import lance

    counts = {}
    for side in ("ours", "pylance"):
        uri, expected = _dataset(slow_s3, f"drv-{side}.lance")
        slow_s3.proxy.reset()
        if side == "ours":
            m = compact(spark, uri, target_rows_per_fragment=100_000, storage_options=slow_s3.options,
                        tuning=ON)
            assert m.tasks_in_driver == 1 and m.fragments_added == 1 and m.orphan_files_deleted == 0
        else:
            lance.dataset(uri, storage_options=slow_s3.options).optimize.compact_files(
                target_rows_per_fragment=100_000, num_threads=2)
        st = slow_s3.proxy.stats()
        counts[side] = st["ops"]
        after = _after(slow_s3, uri)
        assert len(after.get_fragments()) == 1 and after.to_table().sort_by("id").equals(expected)
        if side == "ours":
            by_dir = Counter((op, path.split("/")[-2]) for op, path, _ in st["log"])
            assert by_dir[("GET", "data")] == 8 and by_dir[("GET", "_deletions")] == 8, by_dir
            assert st["ops"].get("HEAD", 0) == 0
            # open (1 LIST, 1 GET of the manifest); the Rewrite on top of it, unlisted, and no
            # ReserveFragments before it (no index): one transaction, one manifest
            assert st["ops"]["LIST"] == 1 and by_dir[("GET", "_versions")] == 1, st["ops"]
            assert by_dir[("PUT", "_versions")] == by_dir[("PUT", "_transactions")] == 1, by_dir
    assert sum(counts["ours"].values()) <= sum(counts["pylance"].values()), counts


@pytest.mark.parametrize("fault", ["slowdown", "reset"])
def test_in_driver_through_faults(spark, slow_s3: SlowS3, fault: str) -> None:
    uri, expected = _dataset(slow_s3, f"drv-{fault}.lance")
    proxy = slow_s3.proxy
    proxy.reset()
    proxy.inject(fault, count=2, ops=["GET"], path_contains="/data/")
    proxy.inject(fault, count=1, ops=["PUT"], path_contains="/data/")
    m = compact(spark, uri, target_rows_per_fragment=100_000, storage_options=slow_s3.options, tuning=ON)
    assert m.tasks_in_driver == 1
    assert proxy.stats()["faults"].get(fault, 0) >= 2
    after = _after(slow_s3, uri)
    assert len(after.get_fragments()) == 1 and after.to_table().sort_by("id").equals(expected)
    # the job's files in data/: the committed one only
    referenced = {f.path for fr in after.get_fragments() for f in fr.data_files()}
    keys = slow_s3.direct.client().list_objects_v2(Bucket=slow_s3.direct.bucket,
                                                   Prefix=uri.split("/", 3)[3] + "/data/").get("Contents", [])
    assert {k["Key"].rsplit("/", 1)[1] for k in keys if m.job_tag in k["Key"]} == referenced


@pytest.mark.parametrize("inline", [64 * 1024, 0])
def test_tasks_read_no_manifest_when_their_slices_carry_it(spark, slow_s3: SlowS3, inline: int) -> None:
    """Spark tasks (none in the driver): their descriptors carry the manifest's bytes they
    need (``Tuning.slice_inline_bytes``), so the manifest is read once, by the driver's open;
    without (0), each task reads its slice. pylance reads the same rows either way."""
    uri, expected = _dataset(slow_s3, f"inline-{inline}.lance")
    slow_s3.proxy.reset()
    m = compact(spark, uri, target_rows_per_fragment=4_000, storage_options=slow_s3.options,
                tuning=Tuning(driver_rewrite_bytes=0, slice_inline_bytes=inline))
    assert m.tasks_in_driver == 0 and m.tasks >= 2
    by_dir = Counter((op, path.split("/")[-2]) for op, path, _ in slow_s3.proxy.stats()["log"])
    if inline:
        assert by_dir[("GET", "_versions")] == 1, by_dir
    else:  # the driver's open, then each task's head and fragments (a worker keeps the head)
        assert by_dir[("GET", "_versions")] > 2, by_dir
    after = _after(slow_s3, uri)
    assert len(after.get_fragments()) == m.fragments_added and after.to_table().sort_by("id").equals(expected)
