"""Property tests through the public reader: pylance writes random columns (types, value
distributions, nulls, field-metadata options) in every file version; ``LanceFileReader``
returns what pylance reads, for full scans and for random ``take``s."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops import LanceFileReader
from tests.conftest import pylance_read, pylance_write
from tests.encoding._strategies import flat_columns

OPTIONS = [{}, {"compression": "zstd"}, {"compression": "lz4"}, {"compression": "none"},
           {"structural-encoding": "fullzip"}, {"structural-encoding": "miniblock"}, {"rle-threshold": "0.9"},
           {"dict-divisor": "1"}, {"compression": "zstd", "compression-level": "9"}, {"bss": "on"}]


@st.composite
def extra_columns(draw: st.DrawFn) -> pa.Table:
    """Types the flat strategy lacks: vectors, temporal, float16, dictionary, fixed binary."""
    n = draw(st.integers(1, 2000))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["fsl", "ts", "time", "f16", "dict", "fsb", "duration", "date64"]))
    mask = rng.random(n) < draw(st.sampled_from([0.0, 0.1, 0.9]))
    if kind == "fsl":
        arr = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 8)
    elif kind == "ts":
        arr = pa.array(rng.integers(0, 10**15, n), pa.timestamp("us", tz="UTC"), mask=mask)
    elif kind == "time":
        arr = pa.array(rng.integers(0, 86_400 * 10**6, n), pa.time64("us"), mask=mask)
    elif kind == "f16":
        arr = pa.array(rng.random(n).astype(np.float16), mask=mask)
    elif kind == "dict":
        arr = pa.array([f"k{x}" for x in rng.integers(0, 20, n)]).dictionary_encode()
    elif kind == "fsb":
        arr = pa.array([bytes(rng.integers(0, 256, 4, dtype=np.uint8)) for _ in range(n)], pa.binary(4))
    elif kind == "duration":
        arr = pa.array(rng.integers(-10**9, 10**9, n), pa.duration("ms"), mask=mask)
    else:
        arr = pa.array(rng.integers(0, 10**12, n) // 86_400_000 * 86_400_000, pa.date64(), mask=mask)
    return pa.table({"c": arr})


def _with_options(t: pa.Table, options: dict[str, str]) -> pa.Table:
    f = t.schema.field(0)
    meta = {f"lance-encoding:{k}": v for k, v in options.items()}
    return pa.table([t.column(0)], schema=pa.schema([f.with_metadata(meta)]))


def _check(tmp_path, t: pa.Table, version: str, data: st.DataObject) -> None:
    path = pylance_write(tmp_path / f"p_{version}.lance", t, version)
    theirs = pylance_read(path)
    r = LanceFileReader(path)
    assert r.read().equals(theirs)
    idx = data.draw(st.lists(st.integers(0, t.num_rows - 1), max_size=20))
    assert r.take(idx).equals(theirs.take(pa.array(idx, pa.int64())))


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_columns_with_options_every_version(tmp_path, data) -> None:
    t = data.draw(st.one_of(flat_columns(), extra_columns()))
    version = data.draw(st.sampled_from(["2.0", "2.1", "2.2"]))
    options = data.draw(st.sampled_from(OPTIONS))
    if version == "2.0":
        options = {k: v for k, v in options.items() if k == "compression"}
    _check(tmp_path, _with_options(t, options), version, data)
