"""Columns of every type pylance 14 writes in legacy (0.1) files, with nulls where allowed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

N = 10


def legacy_columns() -> dict[str, pa.Array]:
    st = pa.struct([("x", pa.int32()), ("y", pa.string())])
    return {
        "i8": pa.array([1, None, 3, 4, 5, 6, 7, 8, 9, 10], pa.int8()),
        "u64": pa.array(range(N), pa.uint64()),
        "f16": pa.array(np.arange(N, dtype=np.float16)),
        "f64": pa.array([0.5 * i if i % 3 else None for i in range(N)], pa.float64()),
        "b": pa.array([True, False, None] * 3 + [True]),
        "s": pa.array(["a", "", None, "dd"] * 2 + ["x", "y"]),
        "ls": pa.array(["a", "", None, "dd"] * 2 + ["x", "y"], pa.large_string()),
        "bin": pa.array([b"a", b"", None, b"dd"] * 2 + [b"x", b"y"], pa.binary()),
        "lbin": pa.array([b"a", b"", None, b"dd"] * 2 + [b"x", b"y"], pa.large_binary()),
        "fsb": pa.array([bytes([i, i]) for i in range(N)], pa.binary(2)),
        "dict": pa.array(["a", "b", None, "a"] * 2 + ["c", "a"]).dictionary_encode(),
        "dict_int": pa.array([5, 7, 5, None] * 2 + [9, 5], pa.int64()).dictionary_encode(),
        "fsl": pa.array([[1.0, 2.0]] * 9 + [None], pa.list_(pa.float32(), 2)),
        "fsl_u8": pa.array([[i, i + 1, i + 2] for i in range(N)], pa.list_(pa.uint8(), 3)),
        "lst": pa.array([[1, 2], [], None, [3]] * 2 + [[4], [5, 6]], pa.list_(pa.int32())),
        "llst": pa.array([[1, 2], [], None, [3]] * 2 + [[4], [5, 6]], pa.large_list(pa.int32())),
        "st": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": None}] * 3 + [{"x": 2, "y": "b"}], st),
        "ts": pa.array(range(N), pa.timestamp("us", tz="UTC")),
        "d32": pa.array(range(N), pa.date32()),
        "dec": pa.array([1, 2, None, 4, 5, 6, 7, 8, 9, 10], pa.decimal128(10, 2)),
        "nul": pa.nulls(N),
        "lstr": pa.array([["a", "b"], [], None, ["c"]] * 2 + [["d"], ["e", "f"]], pa.list_(pa.string())),
        "lst_st": pa.array([[{"x": 1}], [], None, [{"x": None}]] * 2 + [[{"x": 4}], [{"x": 5}]],
                           pa.list_(pa.struct([("x", pa.int32())]))),
        "lst_lst": pa.array([[[1], []], [], None, [[2, 3]]] * 2 + [[[4]], [[5], [6]]],
                            pa.list_(pa.list_(pa.int64()))),
        "st_lst": pa.array([{"l": [1, 2]}, {"l": []}, {"l": None}] * 3 + [{"l": [3]}],
                           pa.struct([("l", pa.list_(pa.int16()))])),
        "time": pa.array(range(N), pa.time64("us")),
        "dur": pa.array(range(N), pa.duration("ms")),
    }


def legacy_table(n_repeat: int = 1) -> pa.Table:
    cols = legacy_columns()
    t = pa.table(cols)
    if n_repeat > 1:
        t = pa.concat_tables([t] * n_repeat).combine_chunks()
    return t.append_column("id", pa.array(range(t.num_rows), pa.int64()))
