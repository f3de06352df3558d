"""Binary copy (``try_binary_copy`` of fragments without deleted rows) on the latency store,
requests counted, never seconds: every input data file read with one GET (its size from the
manifest, no HEAD), the GETs in flight together, the output's parts uploaded several at once,
no more requests than pylance's binary copy of a twin; pylance reads the result."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.io import remote
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.files.compaction import compact
from tests.s3.conftest import SlowS3

FRAGMENTS = 8


def _table(n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(start)  # random floats: pages that do not compress
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "x": rng.standard_normal(n), "y": rng.standard_normal(n),
                     "s": pa.array([f"w{i % 97}" for i in ids.tolist()])})


def _write(slow: SlowS3, name: str, rows: int) -> tuple[str, pa.Table]:
    """``FRAGMENTS`` fragments of ``rows`` rows, by pylance (no deletions); the table as pylance reads it."""
    import lance

    uri = slow.uri(name)
    for f in range(FRAGMENTS):
        lance.write_dataset(_table(rows, f * rows), uri, mode="append" if f else "create",
                            storage_options=slow.direct.options, data_storage_version="2.1")
    return uri, lance.dataset(uri, storage_options=slow.direct.options).to_table()


def _data_ops(st: dict) -> Counter:
    return Counter(op for op, path, _ in st["log"] if "/data/" in path)


def _most_at_once(timeline: list, op: str) -> int:
    """The most requests of ``op`` on data files the proxy held at one time."""
    edges = sorted([(start, 1) for o, path, _, start, end in timeline if o == op and "/data/" in path]
                   + [(end, -1) for o, path, _, start, end in timeline if o == op and "/data/" in path])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _check(slow: SlowS3, uri: str, expected: pa.Table) -> None:
    import lance

    after = lance.dataset(uri, storage_options=slow.direct.options)
    assert len(after.get_fragments()) == 1
    assert after.to_table().equals(expected)


def test_binary_copy_one_get_per_file_and_within_pylances_requests(slow_s3: SlowS3) -> None:
    """Eight clean fragments copied page by page into one small file: one GET per input file,
    in flight together, one PUT for the output, no HEAD; no more requests than pylance's
    ``try_binary_copy`` of a twin; pylance reads the same table from both."""
    import lance

    totals = {}
    for side in ("ours", "pylance"):
        uri, expected = _write(slow_s3, f"{side}.lance", 5_000)
        slow_s3.proxy.reset()
        if side == "ours":
            m = compact(None, uri, target_rows_per_fragment=1_000_000, compaction_mode="try_binary_copy",
                        storage_options=slow_s3.options)
            assert (m.fragments_binary_copied, m.pages_reencoded_for_deletions) == (FRAGMENTS, 0)
            assert m.pages_binary_copied >= 4 * FRAGMENTS  # every column's pages moved
        else:
            lance.dataset(uri, storage_options=slow_s3.options).optimize.compact_files(
                target_rows_per_fragment=1_000_000, num_threads=2, compaction_mode="try_binary_copy")
        st = slow_s3.proxy.stats()
        totals[side] = st["total"]
        if side == "ours":
            assert _data_ops(st) == {"GET": FRAGMENTS, "PUT": 1}, _data_ops(st)
            assert st["ops"].get("HEAD", 0) == 0
            assert _most_at_once(st["timeline"], "GET") >= 2  # fetched ahead, not one after another
        _check(slow_s3, uri, expected)
    assert totals["ours"] <= totals["pylance"], totals


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_binary_copy_uploads_parts_in_flight_together(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                                      carrier: str) -> None:
    """A binary copy whose output takes several 5 MiB parts: parts are in flight together (s3fs:
    the first part is held until the second has started - a window of one part would wait for
    the first and fail here, not hang), one GET per input file, one multipart upload; pylance
    reads the same table."""
    from lance_spark_ops.io import obstore_reads

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    uri, expected = _write(slow_s3, f"parts-{carrier}.lance", 100_000)  # ~2 MB per file, ~18 MB in all
    upload_part = remote.S3Upload._upload_part
    started: list[int] = []
    second: list[asyncio.Event] = []

    async def held(self, number, data):  # type: ignore[no-untyped-def]
        if not second:
            second.append(asyncio.Event())
        started.append(number)
        if number == 1:
            await asyncio.wait_for(second[0].wait(), 20)
        else:
            second[0].set()
        return await upload_part(self, number, data)

    monkeypatch.setattr(remote.S3Upload, "_upload_part", held)
    slow_s3.proxy.reset()
    m = compact(None, uri, target_rows_per_fragment=1_000_000, compaction_mode="try_binary_copy",
                storage_options=slow_s3.options)
    assert m.fragments_binary_copied == FRAGMENTS and m.pages_reencoded_for_deletions == 0
    st = slow_s3.proxy.stats()
    ops = _data_ops(st)
    assert ops["GET"] == FRAGMENTS and ops["CREATE_MPU"] == ops["COMPLETE_MPU"] == 1, ops
    assert ops["PUT_PART"] >= 3 and "PUT" not in ops, ops
    assert len(started) == (ops["PUT_PART"] if carrier == "fsspec" else 0)
    assert _most_at_once(st["timeline"], "PUT_PART") >= 2
    _check(slow_s3, uri, expected)


def test_upload_holds_bytes_and_copies_reusable_buffers(slow_s3: SlowS3,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``S3Upload`` takes views of a binary copy's bytes and reused buffers alike: a bytearray
    changed after its write does not change the object; a discard with parts in flight leaves
    no multipart upload behind."""
    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    rng = np.random.default_rng(3)
    payload = rng.integers(0, 255, 13 << 20, dtype=np.uint8).tobytes()
    store = ObjectStore(slow_s3.uri("up"), slow_s3.options)
    slow_s3.proxy.reset()
    out = store.open_output("mixed.bin")
    view = memoryview(payload)
    scratch = bytearray(1 << 20)
    expected = bytearray()
    for i in range(0, len(payload), 3 << 20):
        out.write(view[i:i + (2 << 20)])  # views of fetched bytes (a binary copy's pages)
        expected += payload[i:i + (2 << 20)]
        scratch[:] = payload[i + (2 << 20):i + (3 << 20)].ljust(1 << 20, b"\0")
        out.write(scratch)  # a buffer reused after the write
        expected += scratch
        scratch[:] = b"\xff" * len(scratch)
    out.write(b"")
    out.close()
    parts = -(-len(expected) // (5 << 20))  # the last one of at most a part
    assert parts >= 3
    assert slow_s3.proxy.stats()["ops"] == {"CREATE_MPU": 1, "PUT_PART": parts, "COMPLETE_MPU": 1}
    assert ObjectStore(slow_s3.uri("up"), slow_s3.direct.options).read("mixed.bin") == bytes(expected)
    out = store.open_output("gone.bin")  # discarded with parts in flight: no upload left behind
    out.write(payload)
    out.discard()
    client = slow_s3.direct.client()
    assert not client.list_multipart_uploads(Bucket=slow_s3.direct.bucket).get("Uploads")
    assert ObjectStore(slow_s3.uri("up"), slow_s3.direct.options).list("") == ["mixed.bin"]
