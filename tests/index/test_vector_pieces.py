"""Partitions too large for one task are gathered in pieces (``Tuning.vector_piece_rows``
forced tiny here): the segment pylance reads is the one an unsplit build writes - the same
storage rows in the same order (PQ codes transposed over whole partitions), ``index_stats`` and
query answers equal - and, with given models, pylance's own index's rows and codes; the same for
a merge that folds an old segment in (its rows read in slices)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lance_spark_ops.spark.indices import vector_index
from lance_spark_ops.spark.indices import vector_index_tasks as tasks
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.index.test_build_vector import (
    DIM,
    PARTS,
    append,
    assert_same_storage,
    pq_kw,
    storage,
    twins,
    vectors,
)
from tests.index.vector_build import build_index

PIECE = 97  # rows a range task holds: partitions of ~700 rows go in 7-8 pieces


@pytest.fixture
def split_parts(monkeypatch: pytest.MonkeyPatch) -> list:
    """The parts the assembly got (to show that pieces were made), once ``vector_piece_rows`` is set."""
    seen: list = []
    real = tasks.run_assemble

    def spy(spec: tasks.AssembleSpec, ctx: object) -> object:
        seen.append(spec.parts)
        return real(spec, ctx)

    monkeypatch.setattr(vector_index, "run_assemble", spy)
    return seen


def _model(kind: str, seed: int, parts: int = PARTS) -> dict:
    rng = np.random.default_rng(seed)
    kw = {"ivf_centroids": rng.normal(size=(parts, DIM)).astype(np.float32) * 3, **pq_kw(kind)}
    if kind.endswith("PQ"):
        kw["pq_codebook"] = rng.normal(size=(4, 256, DIM // 4)).astype(np.float32)
    if kind == "IVF_RQ":
        from lance.lance import indices

        kw["rabitq_model"] = indices.build_rq_model(DIM, 5)
    return kw


def _copy(uri: str, name: str) -> str:
    out = str(Path(uri).parent / name)
    shutil.copytree(uri, out)
    return out


def _stats(uri: str) -> dict:
    import lance

    def scrub(v: object) -> object:  # segment uuids and paths differ between the copies
        if isinstance(v, dict):
            return {k: scrub(x) for k, x in v.items() if k not in ("uuid", "uri", "updated_at_timestamp_ms")}
        return [scrub(x) for x in v] if isinstance(v, list) else v

    return scrub(lance.dataset(uri).stats.index_stats("vec_idx"))


def _answers(uri: str) -> list:
    import lance

    ds = lance.dataset(uri)
    out = []
    for q in vectors(20, seed=13):
        t = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}, columns=["id"])
        out.append((t["id"].to_pylist(), np.round(t["_distance"].to_numpy(), 5).tolist()))
    return out


def _aux_rows(uri: str) -> tuple[list, list]:
    """The segment's ``auxiliary.idx`` rows in file order (row ids, storage values)."""
    from lance_spark_ops.file.reader import LanceFileReader
    from lance_spark_ops.index.kinds import uuid_str
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset

    (entry,) = [i for i in index_entries(Dataset.open(uri)) if i.name == "vec_idx"]
    t = LanceFileReader(str(Path(uri) / "_indices" / uuid_str(entry.uuid.uuid) / "auxiliary.idx")).read()
    values = t.column(1).combine_chunks().values.to_numpy(zero_copy_only=False)
    return t.column(0).to_pylist(), values.tolist()


def _pieced(parts: list) -> int:
    """Partitions the assembly got in more than one piece."""
    return len({p.lo for p in parts if p.piece and sum(1 for q in parts if q.piece and q.lo == p.lo) > 1})


@pytest.mark.parametrize("kind", ["IVF_PQ", "IVF_SQ", "IVF_FLAT", "IVF_RQ"])
def test_build_in_pieces_equals_whole(tmp_path: Path, kind: str, split_parts: list,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    whole, theirs = twins(tmp_path, "2.1", False)
    pieces = _copy(whole, "pieces.lance")
    kw = _model(kind, 21)
    build_index(whole, "vec", kind, "vec_idx", num_partitions=PARTS, **kw)
    build_index(pieces, "vec", kind, "vec_idx", num_partitions=PARTS, tuning=Tuning(vector_piece_rows=PIECE),
                **kw)
    lance.dataset(theirs).create_index("vec", kind, name="vec_idx", num_partitions=PARTS, **kw)
    big = sum(p["size"] > PIECE for p in _stats(whole)["indices"][0]["partitions"])
    assert big >= 2 and _pieced(split_parts[-1]) == big and all(
        sum(p.lengths) <= PIECE for p in split_parts[-1]
    )
    assert _aux_rows(pieces) == _aux_rows(whole)
    assert _stats(pieces) == _stats(whole)
    assert _stats(pieces)["num_unindexed_rows"] == 0
    assert _answers(pieces) == _answers(whole)
    assert_same_storage(storage(pieces), storage(theirs), kind)  # pylance's rows and codes


@pytest.mark.parametrize("kind", ["IVF_PQ", "IVF_SQ", "IVF_RQ"])
def test_merge_in_pieces_equals_whole(tmp_path: Path, kind: str, split_parts: list,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An old segment folded in by pieces: its rows read in slices (PQ: transposed columns)."""
    import lance

    whole, _ = twins(tmp_path, "2.2", False)
    kw = _model(kind, 22, parts=2)
    first = build_index(whole, "vec", kind, "vec_idx", num_partitions=2, **kw)
    new = append(whole)
    lance.dataset(whole).delete("id = 5 OR id = 3001")
    pieces = _copy(whole, "pieces.lance")
    build_index(whole, "vec", kind, "vec_idx", fragment_ids=new, model_from=first, merge_with=[first])
    build_index(pieces, "vec", kind, "vec_idx", fragment_ids=new, model_from=first, merge_with=[first],
                tuning=Tuning(vector_piece_rows=PIECE))
    assert _pieced(split_parts[-1]) == 2
    assert _aux_rows(pieces) == _aux_rows(whole)
    assert _stats(pieces) == _stats(whole)
    assert _stats(pieces)["num_unindexed_rows"] == 0
    assert _answers(pieces) == _answers(whole)

