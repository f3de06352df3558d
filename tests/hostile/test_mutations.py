"""Mutated manifests, transaction, deletion (Arrow, roaring), row-id, index and data files
written by pylance must end in a LanceError naming the file, quickly and without asking for
more memory than a small cap (each worker runs under ``RLIMIT_AS`` = its size + 256 MiB)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from tests.hostile.harness import escapes, run_cases
from tests.hostile.mutate import KINDS, cases, make_corpus

pytest.importorskip("lance")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("hostile_corpus")
    index = make_corpus(root)
    return root, index


def _run(corpus: tuple[Path, dict], tmp_path: Path, seed: int, n: int) -> None:
    root, index = corpus
    sizes = {(ds, rel): os.path.getsize(root / ds / rel) for ds, items in index.items() for rel, _ in items}
    drawn = cases(index, sizes, seed, n)
    assert {c.kind for c in drawn} == set(KINDS)  # every file kind is mutated
    results = run_cases(drawn, root, tmp_path)
    bad = escapes(drawn, results)
    assert not bad, "\n".join(bad)
    statuses = Counter(r["status"] for r in results.values())
    assert statuses["lance"] > n // 3, statuses  # the mutations do damage: most are caught
    assert max(r["sec"] for r in results.values()) < 5.0
    print(json.dumps({"seed": seed, "cases": n, **statuses}))


def test_mutations(corpus: tuple[Path, dict], tmp_path: Path) -> None:
    _run(corpus, tmp_path, seed=20251124, n=300)


@pytest.mark.slow
def test_mutations_many(corpus: tuple[Path, dict], tmp_path: Path) -> None:
    _run(corpus, tmp_path, seed=7, n=4000)


@pytest.mark.slow
def test_data_file_metadata_sweep(corpus: tuple[Path, dict], tmp_path: Path) -> None:
    """Huge u32 / u64 values written at every one of the last 256 bytes of a data file of each
    format (footer, offset tables, column metadata: where lengths and counts live)."""
    from tests.hostile.mutate import Case

    root, index = corpus
    drawn = []
    for ds, items in sorted(index.items()):
        rel = next(r for r, k in items if k == "data")
        size = os.path.getsize(root / ds / rel)
        drawn += [Case(ds, rel, "data", op, pos, arg) for pos in range(max(0, size - 256), size)
                  for op, arg in (("huge32", 0), ("huge64", 5), ("huge32", 3))]
    results = run_cases(drawn, root, tmp_path)
    bad = escapes(drawn, results)
    assert not bad, "\n".join(bad)
