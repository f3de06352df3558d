"""Write the time machine's datasets with whatever pylance this interpreter has (run by
``make_envs.py`` with an old release's venv; never imported by the tests).

``python writer.py OUT`` writes one dataset per subdirectory of OUT the way users of that release
did - appends, small and large deletes, an update, schema evolution, stable row ids, every index
type the release builds, tags, each storage version it offers - and ``OUT/manifest.json``:
``{"release", "datasets": {name: {"kind", "storage", "ops", "indices"}}, "skipped": {what: why}}``.
A step the release lacks (no such API, or it raises) is recorded under ``skipped`` and the
dataset keeps the steps before it."""

import json
import os
import sys
import traceback

import lance
import numpy as np
import pyarrow as pa

OUT = sys.argv[1]
RELEASE = lance.__version__
SKIPPED = {}
DATASETS = {}
DIM = 8
APPEND = {"mode": "append", "max_rows_per_file": 200}


def table(lo, hi, seed=0):
    """Rows id in [lo, hi): ints, a float with nulls, strings, a label list, a vector."""
    rng = np.random.default_rng(seed + lo)
    ids = np.arange(lo, hi, dtype=np.int64)
    n = hi - lo
    f = pa.array(rng.normal(size=n), mask=(ids % 11 == 0))
    s = pa.array([f"s{i % 37}" for i in ids])
    labels = pa.array([[f"l{i % 5}", f"l{i % 3}"] for i in ids])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * DIM).astype(np.float32)), DIM)
    return pa.table({"id": ids, "f": f, "s": s, "labels": labels, "vec": vec})


def try_step(name, what, fn):
    """Run one step; on failure record why and return False."""
    try:
        fn()
        DATASETS[name]["ops"].append(what)
        return True
    except BaseException as e:  # noqa: BLE001 - an old release lacking a step (pyo3 panics too)
        SKIPPED[f"{name}:{what}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return False


def storage_kwargs(storage):
    if storage is None:
        return {}
    if storage == "legacy-flag":
        return {"use_legacy_format": True}
    if storage == "v2-flag":
        return {"use_legacy_format": False}
    return {"data_storage_version": storage}


def write(name, kind, storage, data, **kw):
    uri = os.path.join(OUT, name)
    DATASETS[name] = {"kind": kind, "storage": storage, "ops": [], "indices": []}
    lance.write_dataset(data, uri, max_rows_per_file=200, **storage_kwargs(storage), **kw)
    DATASETS[name]["ops"].append("write")
    return uri


def basic(name, storage):
    """appends, deletes small and large, an update, a tag."""
    try:
        uri = write(name, "basic", storage, table(0, 600))
    except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
        DATASETS.pop(name, None)
        SKIPPED[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return
    try_step(name, "append", lambda: lance.write_dataset(table(600, 900), uri, **APPEND))
    try_step(name, "delete_small", lambda: lance.dataset(uri).delete("id % 17 = 3"))
    try_step(name, "delete_large", lambda: lance.dataset(uri).delete("id >= 200 AND id < 390"))
    try_step(name, "update", lambda: lance.dataset(uri).update({"f": "f + 1.0"}, where="id % 7 = 0"))
    try_step(name, "tag", lambda: lance.dataset(uri).tags.create("t1", lance.dataset(uri).version))
    try_step(name, "append2", lambda: lance.write_dataset(table(900, 1000), uri, mode="append"))


def schema_evo(name, storage):
    """add/drop/alter columns, merge."""
    try:
        uri = write(name, "schema", storage, table(0, 500))
    except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
        DATASETS.pop(name, None)
        SKIPPED[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return
    try_step(name, "delete", lambda: lance.dataset(uri).delete("id % 13 = 1"))

    def merge():
        ds = lance.dataset(uri)
        extra = pa.table({"id": np.arange(0, 500, dtype=np.int64), "m": np.arange(500, dtype=np.int32) * 3})
        ds.merge(extra, "id")
    try_step(name, "merge", merge)
    try_step(name, "add_columns", lambda: lance.dataset(uri).add_columns({"g": "id * 2"}))
    try_step(name, "drop_columns", lambda: lance.dataset(uri).drop_columns(["s"]))
    try_step(name, "add_columns2", lambda: lance.dataset(uri).add_columns({"s": "'x'"}))
    try_step(name, "alter_columns", lambda: lance.dataset(uri).alter_columns({"path": "g", "name": "g2"}))
    try_step(name, "alter_type", lambda: lance.dataset(uri).alter_columns({"path": "m",
                                                                          "data_type": pa.int64()}))

    def append():
        rows = lance.dataset(uri).to_table().slice(0, 50)
        rows = rows.set_column(0, "id", pa.array(np.arange(1000, 1050, dtype=np.int64)))
        lance.write_dataset(rows, uri, mode="append")
    try_step(name, "append", append)
    try_step(name, "update", lambda: lance.dataset(uri).update({"f": "2.5"}, where="id % 5 = 0"))


def stable(name, storage):
    import inspect
    params = inspect.signature(lance.write_dataset).parameters
    flag = "enable_stable_row_ids" if "enable_stable_row_ids" in params else "enable_move_stable_row_ids"
    try:
        uri = write(name, "stable_row_ids", storage, table(0, 600), **{flag: True})
    except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
        DATASETS.pop(name, None)
        SKIPPED[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return
    try_step(name, "append", lambda: lance.write_dataset(table(600, 800), uri, **APPEND))
    try_step(name, "delete", lambda: lance.dataset(uri).delete("id % 9 = 2 OR (id >= 100 AND id < 190)"))
    try_step(name, "update", lambda: lance.dataset(uri).update({"f": "f * 2"}, where="id % 10 = 4"))
    try_step(name, "compact", lambda: lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=400))


def indexed(name, storage):
    """every index type the release builds, then appends and deletes after it."""
    try:
        uri = write(name, "indexed", storage, table(0, 1200))
    except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
        DATASETS.pop(name, None)
        SKIPPED[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return

    def scalar(col, kind, index_name=None):
        def f():
            ds = lance.dataset(uri)
            if index_name is None:
                ds.create_scalar_index(col, kind)
            else:  # a second index on the column needs its own name (else it replaces the first)
                ds.create_scalar_index(col, kind, name=index_name)
            DATASETS[name]["indices"].append([col, kind])
        return f
    try_step(name, "index_btree", scalar("id", "BTREE"))
    try_step(name, "index_bitmap", scalar("s", "BITMAP"))
    try_step(name, "index_label_list", scalar("labels", "LABEL_LIST"))
    try_step(name, "index_inverted", scalar("s", "INVERTED", "s_fts"))

    def vec(kind, **kw):
        def f():
            lance.dataset(uri).create_index("vec", kind, num_partitions=2, **kw)
            DATASETS[name]["indices"].append(["vec", kind])
        return f
    try_step(name, "index_ivf_pq", vec("IVF_PQ", num_sub_vectors=2))
    try_step(name, "append", lambda: lance.write_dataset(table(1200, 1400), uri, **APPEND))
    try_step(name, "delete", lambda: lance.dataset(uri).delete("id % 19 = 5 OR (id >= 400 AND id < 560)"))
    try_step(name, "optimize_indices", lambda: lance.dataset(uri).optimize.optimize_indices())
    try_step(name, "append3", lambda: lance.write_dataset(table(1400, 1500), uri, mode="append"))


def hnsw(name, storage):
    """an IVF_HNSW_SQ index (its own dataset: one vector index per column), then deletes."""
    try:
        uri = write(name, "hnsw", storage, table(0, 1000))
    except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
        DATASETS.pop(name, None)
        SKIPPED[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return

    def build():
        lance.dataset(uri).create_index("vec", "IVF_HNSW_SQ", num_partitions=2)
        DATASETS[name]["indices"].append(["vec", "IVF_HNSW_SQ"])
    if not try_step(name, "index_ivf_hnsw_sq", build):
        DATASETS.pop(name, None)
        return
    try_step(name, "append", lambda: lance.write_dataset(table(1000, 1100), uri, mode="append"))
    try_step(name, "delete", lambda: lance.dataset(uri).delete("id % 23 = 4 OR (id >= 300 AND id < 420)"))


def quirk_schema(name):
    """add / append / drop / add: pylance 0.10.5 left duplicate field ids in the data files
    (the sequence of Lance's test_data/v0.10.5/corrupt_schema)."""
    uri = os.path.join(OUT, name)
    DATASETS[name] = {"kind": "quirk_schema", "storage": None, "ops": [], "indices": []}
    lance.write_dataset(pa.table({"x": pa.array(range(2), pa.int64())}), uri)
    ok = try_step(name, "add_yz", lambda: lance.dataset(uri).add_columns({"y": "x * 2", "z": "x * 3"}))
    ok = ok and try_step(name, "add_a", lambda: lance.dataset(uri).add_columns({"a": "-x"}))
    new = pa.table({"x": pa.array(range(2, 4), pa.int64()), "y": pa.array([4, 6], pa.int64()),
                    "z": pa.array([6, 9], pa.int64()), "a": pa.array([-2, -3], pa.int64())})
    ok = ok and try_step(name, "append", lambda: lance.write_dataset(new, uri, mode="append"))
    ok = ok and try_step(name, "drop_az", lambda: lance.dataset(uri).drop_columns(["a", "z"]))
    ok = ok and try_step(name, "add_bc", lambda: lance.dataset(uri).add_columns({"b": "x * 4", "c": "x * 5"}))
    if not ok:
        DATASETS.pop(name, None)


def quirk_bitmap(name):
    """an IVF_PQ index, an insert, optimize_indices(num_indices_to_merge=0): pylance 0.21 gave
    the delta a bitmap overlapping the first one (Lance's test_data/v0.21.0)."""
    uri = os.path.join(OUT, name)
    DATASETS[name] = {"kind": "quirk_bitmap", "storage": None, "ops": [], "indices": []}
    lance.write_dataset(table(0, 512), uri)
    ok = try_step(name, "index", lambda: lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=1,
                                                                         num_sub_vectors=1))
    ok = ok and try_step(name, "append", lambda: lance.write_dataset(table(512, 600), uri, mode="append"))
    ok = ok and try_step(name, "optimize", lambda: lance.dataset(uri).optimize.optimize_indices(
        num_indices_to_merge=0))
    if ok:
        DATASETS[name]["indices"].append(["vec", "IVF_PQ"])
    else:
        DATASETS.pop(name, None)


def storages():
    """The storage versions this release offers: None (its default), then the named ones."""
    import inspect
    params = inspect.signature(lance.write_dataset).parameters
    out = [None]
    if "data_storage_version" in params:
        out += ["legacy", "2.0", "2.1"]
    elif "use_legacy_format" in params:
        out += ["legacy-flag", "v2-flag"]
    return out


def main():
    for storage in storages():
        tag = {None: "default"}.get(storage, storage)
        basic(f"basic-{tag}", storage)
    schema_evo("schema-default", None)
    stable("stable-default", None)
    indexed("indexed-default", None)
    hnsw("hnsw-default", None)
    for quirk in (quirk_schema, quirk_bitmap):
        try:
            quirk(f"quirk-{quirk.__name__.split('_')[1]}")
        except BaseException as e:  # noqa: BLE001 - pyo3 panics are BaseExceptions
            SKIPPED[quirk.__name__] = f"{type(e).__name__}: {str(e)[:300]}"
    if "legacy" in storages():
        schema_evo("schema-legacy", "legacy")
        indexed("indexed-legacy", "legacy")
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"release": RELEASE, "datasets": DATASETS, "skipped": SKIPPED}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
