"""Files written by pylance across the case matrix are read back by our reader exactly as
pylance reads them: full read, streamed batches and take, for versions 2.0 / 2.1 / 2.2."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from lance_spark_ops.file.inspect import describe_pages
from lance_spark_ops.file.metadata import load_metadata
from lance_spark_ops.io import ObjectStore
from tests.conftest import pylance_read
from tests.file.cases import CASES

PARAMS = [pytest.param(c, v, id=f"{c.name}-{v}") for c in CASES for v in c.versions]


def _diff(ours: pa.Table, theirs: pa.Table) -> str:
    if ours.schema != theirs.schema:
        return f"schema differs:\nours:   {ours.schema}\ntheirs: {theirs.schema}"
    for name in theirs.column_names:
        a, b = ours.column(name), theirs.column(name)
        if not a.equals(b):
            a, b = a.combine_chunks(), b.combine_chunks()
            for i in range(len(b)):
                if a[i] != b[i]:
                    return f"column {name!r} first differs at row {i}: ours {a[i]} theirs {b[i]}"
            return f"column {name!r} differs (nulls/offsets)"
    return "tables differ"


def _assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.equals(theirs), _diff(ours, theirs)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Cache: (case, version) -> (path, pylance's read), written once per module."""
    base = tmp_path_factory.mktemp("matrix")
    cache: dict[tuple[str, str], tuple[str, pa.Table]] = {}

    def get(case, version):
        key = (case.name, version)
        if key not in cache:
            from tests.conftest import pylance_write

            path = pylance_write(base / f"{case.name}-{version}.lance", case.build(), version)
            cache[key] = (path, pylance_read(path))
        return cache[key]

    return get


@pytest.mark.parametrize("case,version", PARAMS)
def test_read_matches_pylance(case, version, written) -> None:
    path, theirs = written(case, version)
    reader = LanceFileReader(path)
    assert reader.version == version
    assert reader.num_rows == theirs.num_rows
    assert reader.schema.equals(theirs.schema, check_metadata=True)
    _assert_same(reader.read(), theirs)


@pytest.mark.parametrize("case,version", PARAMS)
def test_expected_encodings_occur(case, version, written) -> None:
    path, _ = written(case, version)
    expected = case.expect.get(version) or (case.expect.get("2.1", ()) if version == "2.2" else ())
    if not expected:
        return
    meta = load_metadata(*ObjectStore.for_file(path))
    seen = {name for info in describe_pages(meta) for name in info.encodings}
    missing = [e for e in expected if e not in seen]
    assert not missing, f"expected encodings {missing} not written by pylance; saw {sorted(seen)}"


@pytest.mark.parametrize("case,version", PARAMS)
def test_take_and_batches_match(case, version, written) -> None:
    path, theirs = written(case, version)
    reader = LanceFileReader(path)
    n = theirs.num_rows
    rng = np.random.default_rng(11)
    idx = np.concatenate([rng.integers(0, n, 25), [0, n - 1, n // 2, n // 2]])
    _assert_same(reader.take(idx), theirs.take(pa.array(idx)))
    batches = list(reader.iter_batches(batch_rows=max(1, n // 3 + 7)))
    assert sum(b.num_rows for b in batches) == n
    _assert_same(pa.Table.from_batches(batches, schema=reader.schema), theirs)


def _encodings(path: str) -> set[str]:
    meta = load_metadata(*ObjectStore.for_file(path))
    return {name for info in describe_pages(meta) for name in info.encodings}


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize(("data", "option", "value", "present_without", "kind"), [
    # long runs: RLE by default, no RLE when the run ratio must be below 0.001
    (lambda: pa.array(np.repeat(np.arange(100, dtype=np.int32), 50)), "rle-threshold", "0.001", "rle", "rle"),
    # 1000 distinct strings in 5000 rows: a dictionary by default, none with divisor 100
    (lambda: pa.array([f"value-{i % 1000}" for i in range(5000)]), "dict-divisor", "100", "dictionary",
     "dictionary"),
], ids=["rle-threshold", "dict-divisor"])
def test_field_metadata_options_change_the_file(tmp_path, version, data, option, value, present_without,
                                                 kind) -> None:
    """The option demonstrably changes what pylance writes, and we read both files as pylance."""
    from tests.conftest import pylance_write

    arr = data()
    plain = pa.table({"v": arr})
    tuned_field = pa.field("v", arr.type, True, {f"lance-encoding:{option}": value})
    tuned = pa.table([arr], schema=pa.schema([tuned_field]))
    p1 = pylance_write(tmp_path / "plain.lance", plain, version)
    p2 = pylance_write(tmp_path / "tuned.lance", tuned, version)
    assert present_without in _encodings(p1)
    assert kind not in _encodings(p2)
    for p in (p1, p2):
        assert LanceFileReader(p).read().column("v").equals(pylance_read(p).column("v"))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_has_large_chunk_marks_every_2_2_miniblock_page(tmp_path, version) -> None:
    """pylance 14 sets MiniBlockLayout.has_large_chunk on every 2.2 mini-block page and never
    on 2.1 pages; we read both as pylance does."""
    from lance_spark_ops.file.columns import page_layout
    from tests.conftest import pylance_write

    t = pa.table({
        "i": pa.array(np.arange(20_000) % 977),
        "s": pa.array([f"k{i % 50}" for i in range(20_000)]),
        "f": pa.array(np.random.default_rng(0).random(20_000)),
    })
    path = pylance_write(tmp_path / "m.lance", t, version)
    meta = load_metadata(*ObjectStore.for_file(path))
    layouts = [page_layout(p, path, "") for c in range(meta.num_columns) for p in meta.column(c).pages]
    mini = [lay.mini_block_layout for lay in layouts if lay.WhichOneof("layout") == "mini_block_layout"]
    assert len(mini) >= 3
    assert all(m.has_large_chunk == (version == "2.2") for m in mini)
    assert LanceFileReader(path).read().equals(pylance_read(path))
