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
