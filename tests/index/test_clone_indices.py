"""Indices of a shallow clone live under the source dataset (``IndexMetadata.base_id``): our
compaction of the clone reads them there, writes the remapped ones under the clone's own root,
and leaves the source untouched; pylance answers as before on both."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import build, queries, unindexed

SCALARS = (("id", "BTREE", None), ("cat", "BITMAP", None))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_compacting_a_clone_remaps_the_source_indices(tmp_path: Path) -> None:
    import lance

    src, dst = tmp_path / "src", tmp_path / "clone"
    build(str(src), "2.2", False, scalar=SCALARS, vector=(("IVF_PQ", "vec_pq"),))
    source = lance.dataset(str(src))
    source.tags.create("t1", source.version)
    source.shallow_clone(str(dst), "t1")
    indexed = Dataset.open(str(dst)).manifest_file.index_section.indices
    assert indexed and all(i.HasField("base_id") for i in indexed)  # the clone's indices live in src
    before_src, before_dst = queries(lance.dataset(str(src))), queries(lance.dataset(str(dst)))
    twin = tmp_path / "twin"
    shutil.copytree(src, twin)
    files_src = _tree(src)

    m = compact(None, str(dst), target_rows_per_fragment=100_000)

    assert m.fragments_removed > m.fragments_added >= 1
    assert sum(m.indices_remapped.values()) == 3
    clone = lance.dataset(str(dst))
    assert queries(clone) == before_dst and set(unindexed(clone).values()) == {0}
    now = Dataset.open(str(dst)).manifest_file.index_section.indices
    assert not any(i.HasField("base_id") for i in now)  # remapped under the clone's own root
    assert all((dst / "_indices" / str(uuid.UUID(bytes=bytes(i.uuid.uuid)))).is_dir() for i in now)
    assert _tree(src) == files_src and queries(lance.dataset(str(src))) == before_src
