"""Tasks that read their fragments one after another fetch the small files ahead, many in flight
(``FragmentBatch.fetched_ahead``): add_columns (deletion and small data files) and the row-id
index rebuild (deletion files); add_columns' new files close in the background, so their
uploads overlap the next fragments. Checked by what the tasks schedule and by a barrier, never
by time; pylance reads every result."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark_ops.errors import LanceError
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.io.storage import ObjectStore
from tests.s3.conftest import SlowS3

FRAGMENTS = 8


def _write(slow: SlowS3, name: str, **kw: object) -> str:
    import lance

    ids = np.arange(FRAGMENTS * 500, dtype=np.int64)
    uri = slow.uri(name)
    lance.write_dataset(pa.table({"id": ids, "val": ids * 10}), uri, storage_options=slow.direct.options,
                        max_rows_per_file=500, data_storage_version="2.1", **kw)
    lance.dataset(uri, storage_options=slow.direct.options).delete("id % 7 = 0")
    return uri


def _pylance(slow: SlowS3, uri: str):  # type: ignore[no-untyped-def]
    import lance

    return lance.dataset(uri, storage_options=slow.direct.options)


@pytest.fixture
def scheduled(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The relative paths of each ``ObjectStore.prefetch`` call, in order."""
    calls: list[list[str]] = []
    real = ObjectStore.prefetch

    def spy(self: ObjectStore, items):  # type: ignore[no-untyped-def]
        items = list(items)
        calls.append([rel for rel, _ in items])
        return real(self, items)

    monkeypatch.setattr(ObjectStore, "prefetch", spy)
    return calls


def _column_fn():  # type: ignore[no-untyped-def]
    from lance_spark_ops.spark.files.columns import ColumnFunction

    return ColumnFunction(lambda b: {"w": pc.multiply(b.column("id"), 3)}, pa.schema([("w", pa.int64())]),
                          ("id",))


def test_add_columns_fetches_ahead_and_closes_in_the_background(
        slow_s3: SlowS3, scheduled: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.spark.files.columns import add_columns

    uri = _write(slow_s3, "ahead-ac.lance")
    expected = _pylance(slow_s3, uri).to_table().sort_by("id")
    # the first two new files' closes meet at a barrier: closed in turn, the first would wait
    # for a second that never starts, and the barrier breaks (the test fails, it does not hang)
    barrier, real_close, seen = threading.Barrier(2, timeout=30), LanceFileWriter.close, []

    def close(self: LanceFileWriter):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        if len(seen) <= 2:
            barrier.wait()
        return real_close(self)

    monkeypatch.setattr(LanceFileWriter, "close", close)
    add_columns(None, uri, _column_fn(), storage_options=slow_s3.options)
    assert len(seen) == FRAGMENTS and all(name.startswith("lso-column-close") for name in seen), seen
    # one call naming every fragment's deletion file and data file before any was read
    (call,) = scheduled
    assert sum("_deletions/" in rel for rel in call) == FRAGMENTS
    assert sum("data/" in rel for rel in call) == FRAGMENTS
    got = _pylance(slow_s3, uri).to_table().sort_by("id")
    assert got.column("w").equals(pc.multiply(got.column("id"), 3))
    assert got.drop_columns(["w"]).equals(expected)


def test_add_columns_close_failure_leaves_no_file(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.spark.files.columns import add_columns

    uri = _write(slow_s3, "ahead-fail.lance")
    before = _pylance(slow_s3, uri)
    client = slow_s3.direct.client()
    files = {o["Key"] for o in client.list_objects_v2(Bucket=slow_s3.direct.bucket)["Contents"]}
    real_close, calls = LanceFileWriter.close, []

    def close(self: LanceFileWriter):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise LanceError("injected: the third file's upload failed")
        return real_close(self)

    monkeypatch.setattr(LanceFileWriter, "close", close)
    with pytest.raises(LanceError, match="injected"):
        add_columns(None, uri, _column_fn(), storage_options=slow_s3.options)
    after = {o["Key"] for o in client.list_objects_v2(Bucket=slow_s3.direct.bucket)["Contents"]}
    assert after == files  # the closes that landed, before and after the failed one, deleted
    assert _pylance(slow_s3, uri).version == before.version


def test_row_id_rebuild_fetches_deletion_files_ahead(slow_s3: SlowS3, scheduled: list[list[str]]) -> None:
    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    uri = _write(slow_s3, "ahead-rid.lance", enable_stable_row_ids=True)
    ds = _pylance(slow_s3, uri)
    before = ds.to_table(columns=["id", "val"], with_row_id=True).sort_by("_rowid")
    deletions = {f.metadata.deletion_file.path(f.fragment_id) for f in ds.get_fragments()
                 if f.metadata.deletion_file is not None}
    assert len(deletions) == FRAGMENTS
    rebuild_row_id_index(None, uri, storage_options=slow_s3.options)
    # every task's deletion files in one call, ahead of its reads: each phase names them all
    per_call = [{rel for rel in call if "_deletions/" in rel} for call in scheduled]
    assert per_call and all(len(c) > 1 for c in per_call), per_call
    assert set().union(*per_call) == {f"_deletions/{p.rsplit('/', 1)[-1]}" for p in deletions}
    after = _pylance(slow_s3, uri)
    assert after.to_table(columns=["id", "val"], with_row_id=True).sort_by("_rowid").equals(before)


def test_datasource_partition_fetches_its_fragments_ahead(slow_s3: SlowS3,
                                                          scheduled: list[list[str]]) -> None:
    """A partition of several fragments (``max_rows_per_partition``) names every fragment's
    deletion and data file in one call before reading; its rows are pylance's."""
    import json

    from lance_spark_ops.spark.datasource.options import ReadOptions
    from lance_spark_ops.spark.datasource.reader import LanceReader

    uri = _write(slow_s3, "ahead-read.lance")
    opts = ReadOptions.parse({"path": uri, "storage_options": json.dumps(slow_s3.options),
                              "max_rows_per_partition": "2000", "columns": "id,val"})
    reader = LanceReader(opts, None)
    parts = reader.partitions()
    assert len(parts) == FRAGMENTS // 4
    got = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    assert [len(c) for c in scheduled] == [8] * len(parts), scheduled  # 4 deletion + 4 data files each
    assert all(sum("_deletions/" in rel for rel in c) == 4 for c in scheduled)
    expected = _pylance(slow_s3, uri).to_table(columns=["id", "val"])
    assert got.sort_by("id").equals(expected.sort_by("id"))


def test_inverted_build_fetches_ahead(slow_s3: SlowS3, scheduled: list[list[str]]) -> None:
    """The INVERTED build's tokenizing task names every fragment's deletion and data file in one
    call before reading; pylance's full-text answers through our index are its answers through
    its own on a twin."""
    import lance

    from lance_spark_ops.spark.indices.indexing import create_index

    words = np.array(["lance", "spark", "object", "store", "latency", "proxy"])
    ids = np.arange(FRAGMENTS * 500, dtype=np.int64)
    text = pa.array([f"{words[i % 6]} {words[(i * 5) % 6]}" for i in ids.tolist()])
    table = pa.table({"id": ids, "text": text})
    uris = []
    for side in ("ours", "theirs"):
        uri = slow_s3.uri(f"ahead-fts-{side}.lance")
        lance.write_dataset(table, uri, storage_options=slow_s3.direct.options, max_rows_per_file=500,
                            data_storage_version="2.1")
        _pylance(slow_s3, uri).delete("id % 7 = 0")
        uris.append(uri)
    _pylance(slow_s3, uris[1]).create_scalar_index("text", "INVERTED", name="t")
    create_index(None, uris[0], "text", "INVERTED", name="t", storage_options=slow_s3.options)
    (call,) = [c for c in scheduled if any("_deletions/" in rel for rel in c)]
    assert sum("_deletions/" in rel for rel in call) == FRAGMENTS
    assert sum("data/" in rel for rel in call) == FRAGMENTS
    a, b = _pylance(slow_s3, uris[0]), _pylance(slow_s3, uris[1])
    for q in ("lance", "object store"):
        got = sorted(a.to_table(columns=["id"], full_text_query=q).column("id").to_pylist())
        want = sorted(b.to_table(columns=["id"], full_text_query=q).column("id").to_pylist())
        assert got and got == want, q


def test_validation_checks_fragments_together(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fragments are checked several at once (the first two checks meet at a barrier: in turn,
    the barrier breaks), and the findings are those of a check in turn: a missing data file and
    a missing deletion file, each named, in manifest order (a data file gone on S3 used to be a
    ``footer`` finding: its size came from the manifest, and the footer's read found it gone)."""
    from lance_spark_ops.spark.files import validation_tasks
    from lance_spark_ops.spark.files.validation import validate

    uri = _write(slow_s3, "ahead-val.lance")
    frags = _pylance(slow_s3, uri).get_fragments()
    client, bucket = slow_s3.direct.client(), slow_s3.direct.bucket
    prefix = uri.split(f"{bucket}/", 1)[1]
    gone_data = f"{prefix}/data/{frags[2].data_files()[0].path}"
    gone_del = f"{prefix}/{frags[5].metadata.deletion_file.path(frags[5].fragment_id)}"
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": gone_data}, {"Key": gone_del}]})
    barrier, real, calls = threading.Barrier(2, timeout=30), validation_tasks._check_fragment, []

    def check(ds, frag, trust):  # type: ignore[no-untyped-def]
        calls.append(frag.id)
        if len(calls) <= 2:
            barrier.wait()
        return real(ds, frag, trust)

    monkeypatch.setattr(validation_tasks, "_check_fragment", check)
    m = validate(None, uri, storage_options=slow_s3.options)
    missing = [(f["check"], f["fragment"]) for f in m.findings if f["check"] == "missing_file"]
    want = [("missing_file", frags[2].fragment_id), ("missing_file", frags[5].fragment_id)]
    assert missing == want, m.findings
    assert not m.consistent


def test_validation_of_index_files_on_s3(slow_s3: SlowS3) -> None:
    """An index's files sized together: a file removed is one missing_file finding naming it, a
    file cut short one file_size finding, the other files none."""
    from lance_spark_ops.spark.files.validation import validate

    uri = _write(slow_s3, "ahead-idx.lance")
    ds = _pylance(slow_s3, uri)
    ds.create_scalar_index("val", "BTREE", name="v_idx")
    client, bucket = slow_s3.direct.client(), slow_s3.direct.bucket
    prefix = uri.split(f"{bucket}/", 1)[1]
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_indices/")["Contents"]
    keys = sorted(o["Key"] for o in listed)
    assert len(keys) >= 2, keys
    client.delete_object(Bucket=bucket, Key=keys[0])
    body = client.get_object(Bucket=bucket, Key=keys[1])["Body"].read()
    client.put_object(Bucket=bucket, Key=keys[1], Body=body[:-3])
    m = validate(None, uri, storage_options=slow_s3.options)
    got = sorted((f["check"], f["file"].rsplit("/", 1)[-1]) for f in m.findings if "v_idx" in f["detail"])
    names = [k.rsplit("/", 1)[-1] for k in keys]
    assert got == sorted([("missing_file", names[0]), ("file_size", names[1])])


def test_footers_of_large_files_go_out_together(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files too big to fetch whole (> 512 KiB): a task reading one column of each asks for
    every file's footer in one call before its reads (``ObjectStore.prefetch_tails``), where it
    read them a read-ahead window (8) at a time, footer then pages; the footers fetched ahead
    are the ones its reads use (each file read in exactly two GETs: its last 64 KiB, then the
    column's pages), and pylance's full-text answers through our index are its answers
    through its own on a twin."""
    import lance

    from lance_spark_ops.spark.indices.indexing import create_index

    calls: list[list[tuple[str, int]]] = []
    real = ObjectStore.prefetch_tails

    def spy(self: ObjectStore, items, max_size: int) -> None:  # type: ignore[no-untyped-def]
        items = list(items)
        calls.append(items)
        real(self, items, max_size)

    monkeypatch.setattr(ObjectStore, "prefetch_tails", spy)
    n, frags = 120_000, 12  # > READ_AHEAD fragments, each file ~0.7 MB (a 16-d vector column)
    rng = np.random.default_rng(5)
    words = np.array(["lance", "spark", "object", "store", "latency", "proxy"])
    ids = np.arange(n, dtype=np.int64)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 16).astype(np.float32)), 16)
    text = pa.array([f"{words[i % 6]} {words[(i * 5) % 6]}" for i in ids.tolist()])
    table = pa.table({"id": ids, "text": text, "vec": vec})
    uris = []
    for side in ("ours", "theirs"):
        uri = slow_s3.uri(f"tails-{side}.lance")
        lance.write_dataset(table, uri, storage_options=slow_s3.direct.options, max_rows_per_file=n // frags,
                            data_storage_version="2.1")
        uris.append(uri)
    sizes = {f.data_files()[0].path.rsplit("/", 1)[-1]: f.data_files()[0].file_size_bytes
             for f in _pylance(slow_s3, uris[0]).get_fragments()}
    assert len(sizes) == frags and min(sizes.values()) > 512 * 1024, sizes
    _pylance(slow_s3, uris[1]).create_scalar_index("text", "INVERTED", name="t")
    slow_s3.proxy.reset()
    create_index(None, uris[0], "text", "INVERTED", name="t", storage_options=slow_s3.options)
    (call,) = calls
    assert sorted(rel.rsplit("/", 1)[-1] for rel, _ in call) == sorted(sizes), call
    reads = [(path.rsplit("/", 1)[-1], r) for op, path, r in slow_s3.proxy.stats()["log"]
             if op == "GET" and "/data/" in path]
    assert sorted(name for name, _ in reads) == sorted(list(sizes) * 2), reads
    tails = sorted(name for name, r in reads if r == f"bytes={sizes[name] - 64 * 1024}-{sizes[name] - 1}")
    assert tails == sorted(sizes), reads
    a, b = _pylance(slow_s3, uris[0]), _pylance(slow_s3, uris[1])
    for q in ("lance", "object store"):
        got = sorted(a.to_table(columns=["id"], full_text_query=q).column("id").to_pylist())
        want = sorted(b.to_table(columns=["id"], full_text_query=q).column("id").to_pylist())
        assert got and got == want, q
