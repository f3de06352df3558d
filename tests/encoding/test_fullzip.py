"""Full-zip pages written by pylance (2.1 / 2.2) decode like pylance reads them: full scan
and take (with and without the search cache), and the targeted layout / compression really
occurs in each file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.layout.fullzip import FullZipDecoder
from tests.encoding._fz import FetchLog, Written, meta_table

N = 240
RNG = np.random.default_rng(7)
ALPHA = np.frombuffer(b"abcdefghij klmnopqrstuvwxyz .,", np.uint8)


def text(n: int, width: int, seed: int = 0) -> list[str]:
    r = np.random.default_rng(seed)
    codes = ALPHA[r.integers(0, ALPHA.size, (n, width))]
    return [row.tobytes().decode() for row in codes]


def fsl(n: int, dim: int, item_nulls: float = 0.0, row_mask: np.ndarray | None = None) -> pa.Array:
    r = np.random.default_rng(dim)
    mask = r.random(n * dim) < item_nulls if item_nulls else None
    items = pa.array(r.random(n * dim).astype(np.float32), mask=mask)
    return pa.FixedSizeListArray.from_arrays(
        items, dim, mask=None if row_mask is None else pa.array(row_mask)
    )


def list_of(values: list, pattern: int = 5) -> list:
    """Rows cycling through null list, empty list and lists of 1..3 values (some null)."""
    out, k = [], 0
    for i in range(N):
        m = i % pattern
        if m == 1:
            out.append(None)
        elif m == 2:
            out.append([])
        else:
            row = values[k : k + m]
            k += m
            out.append([None if (i + j) % 7 == 0 else v for j, v in enumerate(row)])
    return out


S300 = text(4 * N, 300, 1)


def _struct_list() -> pa.Array:
    inner = pa.array(list_of(S300), pa.list_(pa.string()))
    return pa.StructArray.from_arrays([inner], names=["l"], mask=pa.array(np.arange(N) % 4 == 3))


def _list_fsl() -> pa.Array:
    vals = fsl(4 * N, 64, item_nulls=0.1)
    rows = [vals[k].as_py() for k in range(4 * N)]
    return pa.array(list_of(rows), pa.list_(pa.list_(pa.float32(), 64)))


def _struct_list_fsl() -> pa.Array:
    return pa.StructArray.from_arrays([_list_fsl()], names=["l"], mask=pa.array(np.arange(N) % 6 == 5))


def _list_list() -> pa.Array:
    rows = []
    for i in range(N):
        if i % 6 == 1:
            rows.append(None)
        elif i % 6 == 2:
            rows.append([])
        else:
            rows.append(
                [
                    None if j == 1 else [S300[(i + j + k) % len(S300)] if k % 3 else None for k in range(j)]
                    for j in range(i % 4)
                ]
            )
    return pa.array(rows, pa.list_(pa.list_(pa.string())))


def _packed() -> pa.Table:
    st = pa.StructArray.from_arrays(
        [
            pa.array(np.arange(N, dtype=np.int32)),
            pa.array(text(N, 40, 3)),
            pa.array(np.arange(N) * 0.5),
            pa.array([b"" if i % 3 == 0 else b"xy" * (i % 50) for i in range(N)], pa.large_binary()),
        ],
        names=["x", "s", "f", "b"],
    )
    return meta_table(st, packed="true")


@dataclass
class Case:
    name: str
    build: Callable[[], pa.Table]
    expect: tuple[str, ...]  # oneof names that must occur in the page layouts
    versions: tuple[str, ...] = ("2.1", "2.2")
    check: Callable[[object], None] | None = None  # extra assertion on the FullZipLayout


def _fz(pred: Callable[[object], bool]) -> Callable[[object], None]:
    def check(layout: object) -> None:
        assert pred(layout.full_zip_layout), layout

    return check


CASES = [
    Case(
        "str500",
        lambda: pa.table({"a": text(N, 500, 2)}),
        ("full_zip_layout", "fsst", "variable"),
        check=_fz(lambda f: f.bits_per_offset == 32 and f.bits_def == 0),
    ),
    Case(
        "str500_nulls",
        lambda: pa.table(
            {
                "a": pa.array(
                    [None if i % 4 == 0 else "" if i % 9 == 0 else s for i, s in enumerate(text(N, 500, 4))]
                )
            }
        ),
        ("full_zip_layout", "fsst"),
        check=_fz(lambda f: f.bits_def == 1),
    ),
    Case(
        "large_str500",
        lambda: pa.table(
            {
                "a": pa.array(
                    [None if i % 5 == 0 else s for i, s in enumerate(text(N, 500, 5))], pa.large_string()
                )
            }
        ),
        ("full_zip_layout", "fsst"),
        check=_fz(lambda f: f.bits_per_offset == 64),
    ),
    Case(
        "bin40k",
        lambda: pa.table(
            {"a": pa.array([RNG.integers(0, 4, 40 * 1024 + i, dtype=np.uint8).tobytes() for i in range(12)])}
        ),
        ("full_zip_layout", "general", "variable"),
    ),
    Case(
        "str40k_nulls",
        lambda: pa.table({"a": pa.array([None if i % 3 == 0 else "q" * (40 * 1024 + i) for i in range(15)])}),
        ("full_zip_layout", "general"),
        check=_fz(lambda f: f.bits_def == 1),
    ),
    Case(
        "fsl128",
        lambda: pa.table({"a": fsl(N, 128)}),
        ("full_zip_layout", "fixed_size_list", "flat"),
        check=_fz(lambda f: f.bits_per_value == 4096),
    ),
    Case(
        "fsl128_item_nulls",
        lambda: pa.table({"a": fsl(N, 128, item_nulls=0.1)}),
        ("fixed_size_list",),
        check=_fz(lambda f: f.bits_per_value == 4224 and f.value_compression.fixed_size_list.has_validity),
    ),
    Case(
        "fsl128_row_nulls",
        lambda: pa.table({"a": fsl(N, 128, row_mask=np.arange(N) % 4 == 0)}),
        ("fixed_size_list",),
        check=_fz(lambda f: f.bits_def == 1),
    ),
    Case(
        "fsl_nested_nulls",
        lambda: pa.table(
            {
                "a": pa.FixedSizeListArray.from_arrays(
                    fsl(4 * N, 32, item_nulls=0.2), 4, mask=pa.array(np.arange(N) % 9 == 0)
                )
            }
        ),
        ("fixed_size_list",),
    ),
    Case(
        "list_str300",
        lambda: pa.table({"a": pa.array(list_of(S300), pa.list_(pa.string()))}),
        ("full_zip_layout", "fsst"),
        check=_fz(lambda f: f.bits_rep == 1 and f.bits_def == 2),
    ),
    Case(
        "list_list_str300",
        lambda: pa.table({"a": _list_list()}),
        ("full_zip_layout",),
        check=_fz(lambda f: f.bits_rep == 2),
    ),
    Case("struct_list_str300", lambda: pa.table({"a": _struct_list()}), ("full_zip_layout",)),
    Case(
        "list_fsl64",
        lambda: pa.table({"a": _list_fsl()}),
        ("full_zip_layout", "fixed_size_list"),
        check=_fz(lambda f: f.bits_rep == 1 and f.WhichOneof("details") == "bits_per_value"),
    ),
    Case("struct_list_fsl64", lambda: pa.table({"a": _struct_list_fsl()}), ("full_zip_layout",)),
    Case(
        "fullzip_ints",
        lambda: meta_table(pa.array(np.arange(N, dtype=np.int64) * 3), structural_encoding="fullzip"),
        ("full_zip_layout", "flat"),
        check=_fz(lambda f: f.bits_per_value == 64 and f.bits_def == 0),
    ),
    Case(
        "fullzip_ints_nulls",
        lambda: meta_table(
            pa.array(np.arange(N, dtype=np.int32), mask=np.arange(N) % 3 == 0), structural_encoding="fullzip"
        ),
        ("full_zip_layout", "flat"),
        check=_fz(lambda f: f.bits_def == 1),
    ),
    Case(
        "fullzip_short_strings",
        lambda: meta_table(pa.array(["a", None, "", "bcd", "e" * 20] * 4), structural_encoding="fullzip"),
        ("full_zip_layout", "variable"),
    ),
    Case(
        "zstd_str500",
        lambda: meta_table(pa.array(text(N, 500, 8)), compression="zstd"),
        ("full_zip_layout", "general"),
    ),
    Case(
        "binary_mixed",
        lambda: pa.table(
            {
                "a": pa.array(
                    [
                        RNG.integers(0, 256, 280, dtype=np.uint8).tobytes() + s.encode()
                        for s in text(N, 200, 9)
                    ]
                )
            }
        ),
        ("full_zip_layout",),
    ),
    Case("packed_struct_str", _packed, ("full_zip_layout", "variable_packed_struct"), versions=("2.2",)),
]
PARAMS = [pytest.param(c, v, id=f"{c.name}-{v}") for c in CASES for v in c.versions]


@pytest.mark.parametrize("case,version", PARAMS)
def test_fullzip_matches_pylance(tmp_path, case: Case, version: str) -> None:
    w = Written.of(tmp_path, case.build(), version, case.name)
    found = w.encodings(0)
    for name in case.expect:
        assert name in found, f"{name} not in {sorted(found)}"
    if case.check:
        for layout in w.layouts(0):
            case.check(layout)
    w.check()


def test_full_scan_is_one_fetch_and_take_reads_only_requested_rows(tmp_path) -> None:
    w = Written.of(tmp_path, pa.table({"a": pa.array(list_of(S300), pa.list_(pa.string()))}), "2.2")
    (page,) = w.columns[0]
    assert page.layout.WhichOneof("layout") == "full_zip_layout"
    log = FetchLog()
    dec = FullZipDecoder(page.layout.full_zip_layout, page.num_rows, page.sizes, "2.2")
    dec.decode(page.fetch(log), None)
    assert len(log.calls) == 1 and {b for b, _, _ in log.calls[0]} == {0, 1}
    rows = np.array([3, 4, 100])
    log = FetchLog()
    got = dec.decode(page.fetch(log), rows)
    assert got.num_rows == 3
    # one read of the repetition index entries, one of the rows' bytes
    assert (
        len(log.calls) == 2
        and all(b == 1 for b, _, _ in log.calls[0])
        and all(b == 0 for b, _, _ in log.calls[1])
    )
    dec.load_search_cache(page.fetch())
    ri = dec.rep_index
    row_bytes = int(ri[5] - ri[3] + ri[101] - ri[100])
    assert sum(s for _, _, s in log.calls[1]) == row_bytes
    assert sum(s for _, _, s in log.calls[0]) == 5 * (page.sizes[1] // (page.num_rows + 1))
    log = FetchLog()
    dec.decode(page.fetch(log), rows)
    assert len(log.calls) == 1 and all(b == 0 for b, _, _ in log.calls[0])


def test_fixed_width_take_needs_no_index(tmp_path) -> None:
    w = Written.of(tmp_path, pa.table({"a": fsl(N, 128, row_mask=np.arange(N) % 4 == 0)}), "2.1")
    (page,) = w.columns[0]
    assert len(page.sizes) == 1
    log = FetchLog()
    rows = np.array([0, 1, 2, 50, 239])
    w.columns[0][0].decoder("2.1").decode(page.fetch(log), rows)
    assert len(log.calls) == 1 and log.bytes == 5 * (1 + 512)
    w.check([rows])


def test_repetition_index_widths(tmp_path) -> None:
    """The index is byte-packed to the narrowest width holding the data size (u8 .. u32)."""
    widths = set()
    for n, width in ((6, 8), (200, 300), (300, 500)):
        w = Written.of(
            tmp_path, meta_table(pa.array(text(n, width, n)), structural_encoding="fullzip"), "2.2", f"w{n}"
        )
        for page in w.columns[0]:
            widths.add(page.sizes[1] // (page.num_rows + 1))
        w.check()
    assert {1, 2, 4} <= widths


def test_many_rows_one_page(tmp_path) -> None:
    w = Written.of(tmp_path, pa.table({"a": text(6000, 400, 11)}), "2.2")
    assert "fsst" in w.encodings(0)
    w.check([np.arange(0, 6000, 7), np.array([5999])])


def test_empty_take(tmp_path) -> None:
    w = Written.of(tmp_path, pa.table({"a": text(20, 500, 12)}), "2.1")
    (page,) = w.columns[0]
    got = page.decoder("2.1").decode(page.fetch(), np.zeros(0, np.int64))
    assert got.num_rows == 0 and got.values.num_values == 0


def test_blob_v2_descriptors_in_dataset(tmp_path) -> None:
    """2.2 datasets store blob v2 descriptors {kind, position, size, blob_id, blob_uri} as a
    full-zip VariablePackedStruct (null rows are empty placeholders)."""
    import lance

    vals = [None if i % 5 == 1 else b"" if i % 5 == 2 else bytes([i]) * (100 + 1000 * i) for i in range(30)]
    fld = pa.field("b", pa.large_binary(), True, {"lance-encoding:blob": "true"})
    ds = lance.write_dataset(pa.table([pa.array(vals, pa.large_binary())], schema=pa.schema([fld])),
                             str(tmp_path / "ds"))
    expected = ds.to_table(columns=["b"])
    assert pa.types.is_struct(expected.schema.field(0).type)
    (path,) = (tmp_path / "ds" / "data").glob("*.lance")
    w = Written(str(path), "2.2", expected)
    assert {"full_zip_layout", "variable_packed_struct"} <= w.encodings(0)
    assert w.read(0).equals(expected.column(0).combine_chunks())
    rows = np.array([0, 1, 2, 29])
    assert w.read(0, rows).equals(expected.column(0).combine_chunks().take(pa.array(rows)))
