"""SQL expressions translated to Arrow (``spark.files.sql_arrow``) against Spark's own evaluation of
the same expressions on the same rows: values, types, nulls, NaN ordering, overflow and
division by zero under ANSI and legacy arithmetic; what cannot be translated falls back."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.spark.files.sql_arrow import compile_frame
from lance_spark_ops.spark.runtime.spark_types import lance_schema_of_spark

pytestmark = pytest.mark.spark

I64 = np.iinfo(np.int64)
I32 = np.iinfo(np.int32)
TABLE = pa.table({
    "a": pa.array([0, 1, -7, 12, None, int(I64.max), int(I64.min), 5], pa.int64()),
    "b": pa.array([3, 0, 2, -5, 1, None, -1, 5], pa.int64()),
    "i": pa.array([1, -2, None, int(I32.max), int(I32.min), 0, 7, 100], pa.int32()),
    "f": pa.array([0.5, math.nan, -0.0, None, math.inf, 2.5, -3.25, math.nan], pa.float64()),
    "g": pa.array([0.5, 1.0, 0.0, 4.0, math.nan, None, -3.25, math.nan], pa.float64()),
    "x": pa.array([True, False, None, True, False, None, True, False]),
    "s": pa.array(["a", "", None, "héllo", "z", "zz", "ß", "日本"]),
})
COLUMNS = {"a": "long", "b": "long", "i": "integer", "f": "double", "g": "double", "x": "boolean",
           "s": "string"}

SAFE = [  # no error for any row of TABLE under either arithmetic mode
    "b * 2 + 1", "b - 3", "-b", "abs(b)", "i + 1L", "f + g", "f * 2 - g", "f / 2",
    "f / (g + 10)", "f % 1.5", "a % 5", "i % -1", "b % 3", "a > b", "a >= b", "a < 3", "a = b", "a <= b",
    "f > g", "f < g", "f = g", "f >= g", "f <= g", "f > 0.5", "f = f", "x AND a > 0", "x OR b < 0",
    "NOT x", "a IS NULL", "f IS NOT NULL", "coalesce(a, b, 0)", "coalesce(f, g)",
    "if(a > 0, a, b)", "if(x, f, g)", "length(s)", "concat(s, '!', s)", "1", "'k'", "true",
    "CAST(i AS BIGINT) + a % 2", "CAST(i AS DOUBLE) / 3", "b / 4", "i / 3", "-f", "+a",
    "a + NULL", "(a % 7) = 3", "f IS NULL OR f > 1e300",
    "7 % 3", "-7 % 3", "10 / 4", "coalesce(NULL, 1)", "if(true, 1, 2)", "length('abc')", "concat('a', 'b')",
]
FAILING_UNDER_ANSI = ["a + 1", "abs(i + 0)", "a * 2", "-a", "abs(a)", "i + i", "b / 0", "a % 0", "f / 0.0",
                      "g / f", "7 % 0", "i * 1000000"]
UNTRANSLATABLE = ["upper(s)", "i * 2.5", "NULL", "try_add(a, 1)", "rand()", "CAST(f AS INT)",
                  "CAST(a AS STRING)",
                  "substring(s, 1, 2)", "a DIV 2", "CASE WHEN a > 0 THEN 1 ELSE 0 END",
                  "named_struct('p', a)", "current_date()"]


def _compile(spark, frame, exprs: dict[str, str]):
    projected = frame.selectExpr(*[f"{e} AS `{n}`" for n, e in exprs.items()])
    fn = compile_frame(spark, projected, list(exprs.values()), COLUMNS,
                       lance_schema_of_spark(projected.schema))
    return projected, fn


def _spark_values(projected) -> pa.Table:
    return projected.toArrow()


def _ansi(spark, enabled: bool):
    class _Ctx:
        def __enter__(self):
            self.old = spark.conf.get("spark.sql.ansi.enabled")
            spark.conf.set("spark.sql.ansi.enabled", str(enabled).lower())

        def __exit__(self, *exc):
            spark.conf.set("spark.sql.ansi.enabled", self.old)

    return _Ctx()


@pytest.fixture(scope="module")
def frame(spark):
    return spark.createDataFrame(TABLE)


def _check_same(spark, frame, table: pa.Table, exprs: dict[str, str]) -> None:
    projected, fn = _compile(spark, frame, exprs)
    assert fn is not None, f"{exprs} should translate"
    ours = fn(table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema))
    theirs = _spark_values(projected)
    assert ours.schema.names == theirs.schema.names
    for name in ours.schema.names:
        o, t = ours.column(name), theirs.column(name).combine_chunks().cast(ours.column(name).type)
        assert _same(o, t), f"{exprs[name]}: ours {o.to_pylist()} != spark {t.to_pylist()}"


def _same(o: pa.Array, t: pa.Array) -> bool:
    """Equal values and nulls; for floats NaN equals NaN and the sign of zero counts."""
    if not pa.types.is_floating(o.type):
        return o.equals(t)
    if o.null_count != t.null_count or not o.is_null().equals(t.is_null()):
        return False
    x = o.fill_null(0.0).to_numpy(zero_copy_only=False)
    y = t.fill_null(0.0).to_numpy(zero_copy_only=False)
    nan = np.isnan(x)
    return bool(np.array_equal(nan, np.isnan(y)) and np.array_equal(x[~nan], y[~nan])
                and np.array_equal(np.signbit(x[~nan]), np.signbit(y[~nan])))


@pytest.mark.parametrize("ansi", [True, False])
def test_translated_expressions_match_spark(spark, frame, ansi: bool) -> None:
    with _ansi(spark, ansi):
        _check_same(spark, frame, TABLE, {f"c{i}": e for i, e in enumerate(SAFE)})


def test_legacy_arithmetic_wraps_and_nulls_like_spark(spark, frame) -> None:
    with _ansi(spark, False):
        _check_same(spark, frame, TABLE, {f"c{i}": e for i, e in enumerate(FAILING_UNDER_ANSI)})


@pytest.mark.parametrize("expr", FAILING_UNDER_ANSI)
def test_ansi_errors_where_spark_errors(spark, frame, expr: str) -> None:
    with _ansi(spark, True):
        projected, fn = _compile(spark, frame, {"c": expr})
        assert fn is not None
        with pytest.raises(Exception) as spark_error:  # noqa: PT011 - Spark's own error class
            _spark_values(projected)
        assert "ARITHMETIC_OVERFLOW" in str(spark_error.value) or "_BY_ZERO" in str(spark_error.value)
        with pytest.raises(InvalidInputError, match="'c'"):
            fn(TABLE.to_batches()[0])


@pytest.mark.parametrize("expr", UNTRANSLATABLE)
def test_untranslatable_expressions_fall_back(spark, frame, expr: str) -> None:
    _, fn = _compile(spark, frame, {"c": expr})
    assert fn is None


def test_widened_columns_are_left_to_spark(spark) -> None:
    frame = spark.createDataFrame([], "u long")
    projected = frame.selectExpr("u + 1 AS c")
    # ``u`` is a uint32 Lance column that Spark reads as long: not in the feedable columns
    assert compile_frame(spark, projected, ["u + 1"], {"a": "long"},
                         lance_schema_of_spark(projected.schema)) is None


_ints = st.one_of(st.none(), st.integers(min_value=int(I64.min), max_value=int(I64.max)),
                  st.integers(-10, 10))
_floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_ints, _ints, _floats, _floats), min_size=1, max_size=30))
def test_property_random_rows_match_spark(spark, rows) -> None:
    """Random values (extremes, nulls, NaN, +-inf, -0.0) through legacy arithmetic and
    comparisons: ours equals Spark's for every row."""
    a, b, f, g = (list(c) for c in zip(*rows, strict=True))
    table = pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64()),
                      "i": pa.array([0] * len(a), pa.int32()), "f": pa.array(f, pa.float64()),
                      "g": pa.array(g, pa.float64()), "x": pa.array([True] * len(a)),
                      "s": pa.array(["s"] * len(a))})
    frame = spark.createDataFrame(table)
    exprs = ["a * b + 1", "a - b", "a % b", "f / g", "f % g", "a < b", "f < g", "f = g", "f >= g",
             "coalesce(a, b)", "if(f > g, a, b)", "-a", "abs(b)", "CAST(a AS DOUBLE) + f"]
    with _ansi(spark, False):
        _check_same(spark, frame, table, {f"c{i}": e for i, e in enumerate(exprs)})


def test_add_columns_arrow_and_spark_engines_agree(spark, tmp_path) -> None:
    import lance

    from lance_spark_ops.spark.files.columns import add_columns

    for version in ("2.0", "2.1", "2.2"):
        uri = str(tmp_path / f"ds_{version}")
        n = 2500
        lance.write_dataset(pa.table({"a": pa.array(range(n), pa.int64()),
                                      "f": pa.array(np.linspace(-2, 2, n)),
                                      "s": [f"v{i}" for i in range(n)]}),
                            uri, data_storage_version=version, max_rows_per_file=1000)
        lance.dataset(uri).delete("a % 9 = 4 OR a < 50")
        exprs = {"p": "a * 3 - 1", "q": "f > 0.5 AND a % 2 = 0", "r": "concat(s, '-', s)",
                 "w": "coalesce(f / (a + 1), -1.0)"}
        m1 = add_columns(spark, uri, {f"{k}1": v for k, v in exprs.items()}, sql_engine="arrow")
        m2 = add_columns(spark, uri, {f"{k}2": v for k, v in exprs.items()}, sql_engine="spark")
        assert (m1.engine, m2.engine) == ("arrow", "spark")
        tbl = lance.dataset(uri).to_table()
        assert tbl.num_rows == n - 50 - sum(1 for a in range(50, n) if a % 9 == 4)
        for k in exprs:
            assert tbl.column(f"{k}1").equals(tbl.column(f"{k}2")), k
        a = np.asarray(tbl.column("a"))
        assert np.array_equal(np.asarray(tbl.column("p1")), a * 3 - 1)


def test_add_columns_arrow_engine_refuses_what_it_cannot_translate(spark, tmp_path) -> None:
    import lance

    from lance_spark_ops.spark.files.columns import add_columns

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"s": ["a", "b"]}), uri)
    with pytest.raises(UnsupportedError, match="need Spark"):
        add_columns(spark, uri, {"u": "upper(s)"}, sql_engine="arrow")
    m = add_columns(spark, uri, {"u": "upper(s)"})
    assert m.engine == "spark"
    assert lance.dataset(uri).to_table().column("u").to_pylist() == ["A", "B"]


def _deleted_rows_dataset(tmp_path, version: str = "2.2") -> str:
    """Rows 0..2999 in three fragments; every row holding an overflow-prone value is deleted."""
    import lance

    uri = str(tmp_path / f"del_{version}")
    a = np.arange(3000, dtype=np.int64)
    a[[7, 1500, 2999]] = I64.max  # a + 1 overflows here only
    lance.write_dataset(pa.table({"a": a, "k": pa.array(np.arange(3000) % 5, pa.int32())}), uri,
                        data_storage_version=version, max_rows_per_file=1000)
    lance.dataset(uri).delete(f"a = {int(I64.max)} OR k = 3")
    return uri


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_arrow_engine_ignores_errors_of_deleted_rows(spark, tmp_path, version: str) -> None:
    """Deleted rows are evaluated too (no filter / scatter), but an ANSI error only they raise
    is not the job's: their live rows are evaluated alone and the values equal Spark's."""
    import lance

    from lance_spark_ops.spark.files.columns import add_columns
    from lance_spark_ops.table.dataset import Dataset

    uri = _deleted_rows_dataset(tmp_path, version)
    m = add_columns(spark, uri, {"p": "a + 1", "c": "coalesce(a, 7) * 0 + 7"}, sql_engine="arrow",
                    batch_rows=256)  # several batches per fragment, some without deletions
    assert m.engine == "arrow"
    live = lance.dataset(uri).to_table(columns=["a", "p", "c"])
    expected = spark.createDataFrame(live.select(["a"]).to_pandas()).selectExpr(
        "a + 1 AS p", "coalesce(a, 7) * 0 + 7 AS c").toArrow()
    assert live.num_rows == 3000 - 3 - 600
    for name in ("p", "c"):
        assert live.column(name).to_pylist() == expected.column(name).to_pylist(), name
    # in the new files deleted rows are null, whatever the expression gives there
    ds = Dataset.open(uri)
    for frag in ds.fragments:
        keep = ds.live_mask(frag)
        got = pa.concat_tables(pa.Table.from_batches([b]) for b in
                               ds.scan_fragment(frag, ["c"], include_deleted=True))
        assert got.num_rows == frag.physical_rows
        assert np.array_equal(got.column("c").is_valid().to_numpy(zero_copy_only=False), keep)


def test_arrow_engine_reports_errors_of_live_rows(spark, tmp_path) -> None:
    import lance

    from lance_spark_ops.spark.files.columns import add_columns

    uri = _deleted_rows_dataset(tmp_path)
    lance.write_dataset(pa.table({"a": pa.array([int(I64.max)], pa.int64()),
                                  "k": pa.array([0], pa.int32())}), uri, mode="append")
    before = sorted(p.name for p in (tmp_path / "del_2.2" / "data").iterdir())
    with pytest.raises(InvalidInputError, match="column 'p'.*overflow"):
        add_columns(spark, uri, {"p": "a + 1"}, sql_engine="arrow")
    assert sorted(p.name for p in (tmp_path / "del_2.2" / "data").iterdir()) == before
    assert "p" not in lance.dataset(uri).schema.names
