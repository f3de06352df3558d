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
