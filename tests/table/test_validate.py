"""Manifest validation (issue #34): inconsistent manifests read as pylance 14 reads them or are
refused typed, and a rewrite keeps exactly the rows read before or refuses with no new version.

The property test draws semantic mutations of real manifests (``manifest_mutations``: duplicate
entries and ids, shared data files, fragments without files, wrong physical / deleted row counts,
file sizes and versions, overlapping row ids, index coverage of fragments that never existed,
``max_fragment_id`` below an id), alone and combined, on pylance-written 0.1, 2.1 (stable row
ids) and 2.2 datasets with deletions and a BTREE index. The oracle is pylance: its read of the
mutated dataset, and its read of ours after our compaction.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import InconsistentDatasetError, LanceError
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.validate import manifest_findings
from tests.table import manifest_mutations as mm

lance = pytest.importorskip("lance")

COMPAT = Path(__file__).parents[1] / "data" / "lance_compat"
BASES = {"v01": ("legacy", False), "v21": ("2.1", True), "v22": ("2.2", False)}
# where pylance reads a count the files contradict (2.x: the first N rows only; v1: every row)
# we refuse instead: the answer depends on the file version, not on the data
REFUSED_WHERE_PYLANCE_READS = {"wrong_physical_rows"}


def _make(root: Path, version: str, stable: bool) -> None:
    t = pa.table({"id": pa.array(range(400), pa.int64()), "s": pa.array([f"x{i}" for i in range(400)])})
    lance.write_dataset(t, root, data_storage_version=version, max_rows_per_file=100,
                        enable_stable_row_ids=stable)
    lance.dataset(root).delete("id % 7 = 3")
    lance.dataset(root).create_scalar_index("id", "BTREE")


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("validate_bases")
    out = {}
    for name, (version, stable) in BASES.items():
        out[name] = root / name
        _make(out[name], version, stable)
    return out


def _rows(t: pa.Table) -> list:
    return sorted(zip(t.column("id").to_pylist(), t.column("s").to_pylist(), strict=True))


def _pylance_read(uri: Path) -> list | Exception:
    try:
        return _rows(lance.dataset(str(uri)).to_table(columns=["id", "s"]))
    except Exception as e:  # noqa: BLE001 - pylance raises OSError / ValueError / ArrowInvalid
        return e


def run_case(src: Path, work: Path, mutations: list[str]) -> str:
    """Mutate a copy, compare reads with pylance, compact, compare again. Returns the outcome."""
    uri = work / "ds"
    shutil.copytree(src, uri)
    try:
        mm.apply(uri, mutations)
    except LookupError:
        return "n/a"
    theirs = _pylance_read(uri)
    try:
        ours: list | LanceError = _rows(Dataset.open(str(uri)).to_table(columns=["id", "s"]))
    except LanceError as e:
        ours = e
    if isinstance(ours, LanceError):
        assert isinstance(theirs, Exception) or set(mutations) & REFUSED_WHERE_PYLANCE_READS, \
            f"{mutations}: we refuse ({ours!r}) what pylance reads"
        assert isinstance(ours, InconsistentDatasetError) or "missing" in str(ours) or \
            isinstance(theirs, Exception), ours
    else:
        assert not isinstance(theirs, Exception), f"{mutations}: pylance refuses ({theirs!r}), we read"
        assert ours == theirs, f"{mutations}: our read differs from pylance's"
    before = lance.dataset(str(uri)).version if not isinstance(theirs, Exception) else None
    versions = sorted(p.name for p in (uri / "_versions").iterdir())
    try:
        compact(None, str(uri), target_rows_per_fragment=1000)
    except LanceError:
        assert sorted(p.name for p in (uri / "_versions").iterdir()) == versions, \
            f"{mutations}: a refused compaction left a new version"
        return "refused"
    assert not isinstance(ours, LanceError), f"{mutations}: compacted what we refuse to read"
    after = _pylance_read(uri)
    assert not isinstance(after, Exception), f"{mutations}: pylance cannot read our compaction: {after!r}"
    assert after == ours, f"{mutations}: compaction changed the rows"
    assert lance.dataset(str(uri)).version > (before or 0)
    return "compacted"


def cases(seed: int, n_combined: int) -> list[tuple[str, list[str]]]:
    """Every mutation alone on every base, then ``n_combined`` random pairs and triples."""
    out = [(b, [m]) for m in mm.MUTATIONS for b in BASES]
    rng = random.Random(seed)
    names = list(mm.MUTATIONS)
    for _ in range(n_combined):
        out.append((rng.choice(list(BASES)), rng.sample(names, rng.choice((2, 3)))))
    return out


# each mutation alone on one base (the bases taken in turn) + 2 combined
DEFAULT = [c for i, c in enumerate(cases(34, 2)) if i >= 3 * len(mm.MUTATIONS) or i % 3 == (i // 3 + 2) % 3]
SLOW = cases(3400, 40)


@pytest.mark.parametrize("base,mutations", DEFAULT, ids=[f"{b}-{'+'.join(m)}" for b, m in DEFAULT])
def test_mutated_manifest(bases: dict[str, Path], tmp_path: Path, base: str, mutations: list[str]) -> None:
    run_case(bases[base], tmp_path, mutations)


@pytest.mark.slow
def test_mutated_manifests_many(bases: dict[str, Path], tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    for k, (base, mutations) in enumerate(SLOW):
        got = run_case(bases[base], tmp_path / str(k), mutations)
        outcomes[got] = outcomes.get(got, 0) + 1
    print(f"VALIDATE CASES {len(SLOW)}: {outcomes}")
    assert outcomes.get("compacted", 0) and outcomes.get("refused", 0)


# -- the outcome per class, pinned ------------------------------------------------------------
@pytest.mark.parametrize("mutation,outcome", [
    ("duplicate_entry", "refused"),       # pylance reads every entry twice, its compaction fails
    ("no_files", "refused"),              # pylance refuses to read
    ("wrong_file_size", "refused"),       # 2.x: pylance refuses to read
    ("wrong_file_version", "refused"),    # 2.x: pylance refuses to read
    ("wrong_deleted_rows", "refused"),    # pylance reads, its compaction fails
    ("shared_file", "compacted"),          # pylance reads and compacts it
    ("index_ghost_fragment", "compacted"),
    ("max_fragment_id_low", "compacted"),
])
def test_outcome_per_class(bases: dict[str, Path], tmp_path: Path, mutation: str, outcome: str) -> None:
    assert run_case(bases["v22"], tmp_path, [mutation]) == outcome


def test_duplicate_entry_stable_row_ids(bases: dict[str, Path], tmp_path: Path) -> None:
    """The issue's case 2 on 2.1 with stable row ids: read as pylance (every row of the repeated
    entry twice), compaction refused - before, it committed every such row twice."""
    assert run_case(bases["v21"], tmp_path, ["duplicate_entry"]) == "refused"


def test_findings_name_fragment_and_check(bases: dict[str, Path], tmp_path: Path) -> None:
    uri = tmp_path / "ds"
    shutil.copytree(bases["v21"], uri)
    mm.apply(uri, ["overlapping_row_ids", "duplicate_entry", "index_ghost_fragment", "max_fragment_id_low"])
    ds = Dataset.open(str(uri))
    got = {(f.check, f.fragment) for f in ds.findings()}
    assert ("duplicate_fragment_id", 0) in got
    assert any(c == "row_id_overlap" for c, _ in got)
    assert ("index_fragment", 10_000) in got
    assert any(c == "max_fragment_id" for c, _ in got)
    with pytest.raises(InconsistentDatasetError, match="fragment 0"):
        ds.check_consistent("compaction")
    assert manifest_findings(Dataset.open(str(bases["v21"])).manifest) == []


# -- Lance's own backward-compatibility datasets ------------------------------------------------
def _compat(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / Path(name).name
    shutil.copytree(COMPAT / name, dst)
    return dst


def test_v0_16_mixed_file_versions_refused(tmp_path: Path) -> None:
    """Two fragments share id 1, v1 and 2.0 files mixed: read as pylance ([1, 2, 1, 3]); every
    rewrite refused typed, as pylance refuses every commit; nothing committed."""
    uri = _compat("v0.16.0/wrong_data_version_no_fix.lance", tmp_path)
    ours = Dataset.open(str(uri)).to_table()
    theirs = lance.dataset(str(uri)).to_table()
    assert ours.column(0).to_pylist() == theirs.column(0).to_pylist() == [1, 2, 1, 3]
    with pytest.raises(OSError, match="mixture of file versions"):
        lance.dataset(str(uri)).delete("false")
    with pytest.raises(InconsistentDatasetError, match="mixture of file versions"):
        compact(None, str(uri), target_rows_per_fragment=1000)
    assert lance.dataset(str(uri)).version == 2
    ds = Dataset.open(str(uri))
    from lance_spark_ops.table.format.transaction import Delete

    with pytest.raises(InconsistentDatasetError, match="mixture of file versions"):
        ds.commit(Delete(updated_fragments=[], deleted_fragment_ids=[], predicate="false"))
    assert lance.dataset(str(uri)).version == 2


def test_v0_8_counts_repaired(tmp_path: Path) -> None:
    """Lance 0.7.5 recorded fragment 0's rows after its deletions and no writer version:
    read as pylance reads it (92 rows) and compacted with the counts repaired."""
    uri = _compat("v0.8.0/migrated_from_v0.7.5", tmp_path)
    theirs = lance.dataset(str(uri)).to_table().column(0).to_pylist()
    assert len(theirs) == 92
    ds = Dataset.open(str(uri))
    assert ds.count_rows() == 92 == lance.dataset(str(uri)).count_rows()
    assert ds.to_table().column(0).to_pylist() == theirs
    compact(None, str(uri), target_rows_per_fragment=1000)
    after = lance.dataset(str(uri))
    assert sorted(after.to_table().column(0).to_pylist()) == sorted(theirs)
    assert after.count_rows() == 92
    assert [f.metadata.physical_rows for f in after.get_fragments()] == [92]
    after.validate()  # pylance's own check passes on what we committed
