"""Datasets with every index type, built by pylance (the oracle), and the queries compared."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pyarrow as pa

from tests.support.pylance_indices import index_segments

SCALAR = (("id", "BTREE", None), ("cat", "BITMAP", None), ("labels", "LABEL_LIST", None),
          ("text", "INVERTED", None), ("id", "ZONEMAP", "id_zm"), ("text", "NGRAM", "text_ngram"))
# one vector column per index: pylance's nearest() uses the first index on the column
VECTOR = (("IVF_PQ", "vec_pq"), ("IVF_FLAT", "vec_flat"), ("IVF_HNSW_SQ", "vec_hnsw"))
VECTOR_COLUMN = {"vec_pq": "vec", "vec_flat": "vec_f", "vec_hnsw": "vec_h"}
# other vector index names tests use (one index per column: pick names on distinct columns)
VECTOR_COLUMN.update({"vec_sq": "vec_s", "vec_hnsw_pq": "vec", "vec_hnsw_flat": "vec_f"})
# at least a partition's rows: the search visits every node the graph reaches, so the answer is
# exact whatever order a (multi-threaded) builder inserted them in - 200 answered as exactly
# almost always, and a full-suite run once saw pylance's own graph miss a neighbour ours found
HNSW_EF = 2400
DIM = 8
QUERY = np.random.default_rng(1).random(DIM, dtype=np.float32)


def table(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    labels = [None if i % 23 == 0 else [f"l{i % 5}", f"l{i % 7}"] for i in ids]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "cat": pa.array([None if i % 31 == 0 else f"c{i % 17}" for i in ids]),
        "labels": pa.array(labels, pa.list_(pa.string())),
        "text": pa.array([f"word{i % 13} other{i % 29}" for i in ids]),
        **{c: pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)
           for c in ("vec", "vec_f", "vec_h", "vec_s")},
    })


def build(uri: str, version: str, stable: bool, *, rows: int = 2400, fragments: int = 8,
          scalar: tuple = SCALAR, vector: tuple = VECTOR, delete: str = "id % 10 = 3",
          metric: str = "l2") -> Any:
    """``fragments`` fragments, the indices, then deletions (the indices keep deleted rows)."""
    import lance

    shutil.rmtree(uri, ignore_errors=True)
    ds = lance.write_dataset(table(rows), uri, max_rows_per_file=rows // fragments,
                             data_storage_version=version, enable_stable_row_ids=stable)
    for col, kind, name in scalar:
        ds.create_scalar_index(col, kind, name=name)
    for kind, name in vector:
        kw = {"num_sub_vectors": 2} if kind.endswith("PQ") else {}
        ds.create_index(VECTOR_COLUMN[name], kind, name=name, num_partitions=2, metric=metric, **kw)
    if delete:
        ds.delete(delete)
    return lance.dataset(uri)


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def queries(ds: Any) -> dict[str, list]:
    """What pylance answers, index by index (every vector index with all partitions probed)."""
    kinds = {i["type"] for i in index_segments(ds)}
    out = {
        "eq": _ids(ds.to_table(filter="id = 1234", columns=["id"])),
        "range": _ids(ds.to_table(filter="id >= 100 AND id < 160", columns=["id"])),
        "in": _ids(ds.to_table(filter="id IN (5, 13, 777, 2001)", columns=["id"])),
        "cat": _ids(ds.to_table(filter="cat = 'c5'", columns=["id"])),
        "cat_in": _ids(ds.to_table(filter="cat IN ('c1', 'c2')", columns=["id"])),
        "labels": _ids(ds.to_table(filter="array_has_any(labels, ['l3'])", columns=["id"])),
        "ngram": _ids(ds.to_table(filter="contains(text, 'other1')", columns=["id"])),
    }
    if "Inverted" in kinds:
        out["fts"] = _ids(ds.to_table(full_text_query="word7", columns=["id"]))
    types = {i["name"]: i["type"] for i in index_segments(ds)}
    for name in VECTOR_COLUMN:
        if name not in types:
            continue
        nearest = {"column": VECTOR_COLUMN[name], "q": QUERY, "k": 10, "nprobes": 2}
        if "HNSW" in types[name]:
            nearest["ef"] = HNSW_EF
        t = ds.to_table(nearest=nearest, filter="id > 300", prefilter=True, columns=["id"])
        out[f"nn_{name}"] = _ids(t)
    return out


def unindexed(ds: Any) -> dict[str, int]:
    return {i["name"]: ds.stats.index_stats(i["name"])["num_unindexed_rows"]
            for i in index_segments(ds) if not i["name"].startswith("__")}
