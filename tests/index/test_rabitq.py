"""RaBitQ (IVF_RQ's quantizer) against pylance 14: for the model pylance was given
(``rabitq_model``), our codes, ex codes and factors of each row pylance stored equal its own bit
for bit (its rows, partitions and centroids as input); the numpy code equals the compiled one."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.vector import rabitq as rq
from lance_spark_ops.index.vector import rabitq_storage as rqs
from lance_spark_ops.index.vector.ivf_build import from_tensor

lance = pytest.importorskip("lance")


def _buffer(reader: LanceFileReader, i: int) -> bytes:
    off, size = reader.metadata.global_buffers.tolist()[i]
    return bytes(reader.read_raw_ranges([(off, size)])[0])


def _pylance_index(tmp_path, metric: str, dim: int, num_bits: int, n: int = 700, ties: bool = False):
    from lance.lance import indices

    rng = np.random.default_rng(dim + num_bits)
    x = (rng.normal(size=(n, dim)) + 3 * rng.normal(size=(6, dim))[rng.integers(0, 6, n)]).astype(np.float32)
    if ties:  # small integers and one-hot rows: many equal magnitudes, equal rescale thresholds
        x = rng.integers(-2, 3, size=(n, dim)).astype(np.float32)
        x[:64] = np.eye(dim, dtype=np.float32)[rng.integers(0, dim, 64)]
    t = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), dim)})
    ds = lance.write_dataset(t, str(tmp_path / "ds"))
    model_json = indices.build_rq_model(dim, num_bits)
    ds.create_index("v", "IVF_RQ", num_partitions=4, metric=metric, num_bits=num_bits,
                    rabitq_model=model_json)
    seg = next((tmp_path / "ds" / "_indices").iterdir())
    ir = LanceFileReader(str(seg / "index.idx"))
    ar = LanceFileReader(str(seg / "auxiliary.idx"))
    cents = from_tensor(index_pb2.IVF.FromString(_buffer(ir, 1)).centroids_tensor, "index.idx")
    lengths = list(index_pb2.IVF.FromString(_buffer(ar, 1)).lengths)
    return x, model_json, cents, lengths, ar


@pytest.mark.parametrize("metric,dim,num_bits,ties", [
    ("l2", 32, 5, False),       # pylance's default width
    ("dot", 64, 3, False),
    ("cosine", 40, 9, False),   # not a power of two: the alternating head / tail transform
    ("l2", 16, 1, False),       # binary codes only
    ("l2", 32, 7, True),
])
def test_codes_and_factors_equal_pylance(tmp_path, metric, dim, num_bits, ties):
    x, model_json, cents, lengths, ar = _pylance_index(tmp_path, metric, dim, num_bits, ties=ties)
    meta = json.loads(json.loads(ar.metadata.arrow_schema.metadata[b"storage_metadata"])[0])
    model = rq.from_metadata(model_json)
    assert model.same(rq.from_metadata(meta))
    assert meta == model.metadata(packed=True)
    stored = ar.read()
    rows = x[stored.column("_rowid").to_numpy().astype(np.int64)]
    if metric == "cosine":
        rows = rq.normalize(rows)
    parts = np.repeat(np.arange(len(lengths)), lengths)
    res = (rows - cents[parts]).astype(np.float32)
    norm_sq = rq.norm_square(res, metric)
    enc = rq.encode(model, res, rq.rotate(model, cents)[parts], norm_sq, "dot" if metric == "dot" else "l2")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    packed = np.concatenate([rqs.pack_codes(enc.codes[s:s + n])
                             for s, n in zip(starts, lengths, strict=True)])
    got = np.stack(stored.column(rqs.CODE_COLUMN).to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(got, packed)
    cols = dict(zip(rqs.FACTOR_COLUMNS, (enc.add, enc.scale, enc.error), strict=True))
    if num_bits > 1:
        ex = np.stack(stored.column(rqs.EX_CODE_COLUMN).to_numpy(zero_copy_only=False))
        np.testing.assert_array_equal(ex, enc.ex_codes)
        cols.update(zip(rqs.EX_FACTOR_COLUMNS, (enc.ex_add, enc.ex_scale), strict=True))
    else:
        assert rqs.EX_CODE_COLUMN not in stored.schema.names
    for name, ours in cols.items():
        np.testing.assert_array_equal(stored.column(name).to_numpy(), ours, err_msg=name)


@pytest.mark.parametrize("metric,dim,num_bits", [("l2", 32, 5), ("cosine", 40, 1)])
def test_distance_to_centroid_from_pylance_factors(tmp_path, metric, dim, num_bits):
    # the squared distance of each row pylance stored to its centroid, recovered from the
    # factors pylance wrote (an optimize's split leaves a row unread when no new centroid can
    # reach it): within the stated rounding bound of the true one
    x, model_json, cents, lengths, ar = _pylance_index(tmp_path, metric, dim, num_bits)
    model = rq.from_metadata(model_json)
    stored = ar.read()
    ids, rows = rqs.table_rows(model, stored, np.asarray(lengths), True)
    vecs = x[ids.astype(np.int64)]
    if metric == "cosine":
        vecs = rq.normalize(vecs)
    parts = np.repeat(np.arange(len(lengths)), lengths)
    true = ((vecs.astype(np.float64) - cents[parts]) ** 2).sum(axis=1)
    rot = rq.rotate(model, cents)
    for p in range(len(lengths)):
        got, err = rqs.residual_norm_squares(model, rows[parts == p], rot[p])
        assert (np.abs(got - true[parts == p]) <= err).all()
        assert err.max() < 1e-3 * true[parts == p].max()  # a bound, not a shrug


def test_model_json_as_pylance():
    from lance.lance import indices

    raw = indices.build_rq_model(48, 5)
    model = rq.from_metadata(raw)
    assert model.to_json() == raw
    assert len(rq.new_model(48, 5, seed=3).signs) == len(model.signs)


@pytest.mark.parametrize("num_bits", range(1, 10))
def test_numpy_equals_compiled(monkeypatch, num_bits):
    kernels = rq.compiled_kernels()
    if kernels is None:
        pytest.skip("numba kernels unavailable")
    rng = np.random.default_rng(num_bits)
    for dim in (24, 64):
        model = rq.new_model(dim, num_bits, seed=num_bits)
        x = rng.normal(size=(150, dim)).astype(np.float32)
        x[0] = 0
        x[1, :3] = -0.0
        c = (rng.normal(size=(150, dim)) * 0.1).astype(np.float32)
        cents = (rng.normal(size=(3, dim)) * 0.1).astype(np.float32)
        parts = rng.integers(0, 3, 150)
        for metric in ("l2", "dot"):
            fast = rq.encode(model, x, c, rq.l2_norm_square(x), metric)
            fused = rq.encode_assigned(model, x, cents, parts, metric)
            monkeypatch.setattr(rq, "_loaded", [None])
            slow = rq.encode(model, x, c, rq.l2_norm_square(x), metric)
            unfused = rq.encode_assigned(model, x, cents, parts, metric)
            monkeypatch.setattr(rq, "_loaded", [kernels])
            for f in ("codes", "add", "scale", "error", "ex_codes", "ex_add", "ex_scale"):
                np.testing.assert_array_equal(getattr(fast, f), getattr(slow, f), err_msg=f)
                np.testing.assert_array_equal(getattr(fused, f), getattr(unfused, f), err_msg=f)


@pytest.mark.parametrize("n", [0, 5, 32, 70])
def test_pack_codes_round_trip(n):
    codes = np.random.default_rng(n).integers(0, 256, size=(n, 6), dtype=np.uint8)
    packed = rqs.pack_codes(codes)
    assert packed.shape == codes.shape
    np.testing.assert_array_equal(rqs.unpack_codes(packed), codes)


def test_bad_models():
    with pytest.raises(InvalidInputError, match="num_bits"):
        rq.new_model(32, 10)
    with pytest.raises(InvalidInputError, match="divisible by 8"):
        rq.new_model(30, 5)
    with pytest.raises(InvalidInputError, match="fast_rotation_signs"):
        rq.from_metadata({"rotation_type": "fast", "code_dim": 32, "num_bits": 5,
                          "fast_rotation_signs": [1, 2]})
    with pytest.raises(InvalidInputError, match="JSON"):
        rq.from_metadata("{not json")
    with pytest.raises(InvalidInputError, match="rotation_type"):
        rq.from_metadata({"rotation_type": "spin", "code_dim": 32, "num_bits": 5})
