"""Issue #25: datasets written by old pylance releases (side venvs made by ``make_envs.py``,
cached under ``.venv-lance/``) read as pylance 14 reads them, and every maintenance job leaves
them as pylance 14 read them (rows, index answers). The default suite runs two releases (the
pre-0.11 v1 era and the 2024 era with ``storage_class``); ``slow`` runs every release."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.timemachine import make_envs
from tests.timemachine.maintain import maintain
from tests.timemachine.oracle import PYLANCE_FAILS, read_mismatches


def _data(release: str) -> tuple[Path, dict]:
    try:
        return make_envs.ensure(release)
    except make_envs.ReleaseUnavailable as e:
        pytest.skip(f"pylance {release} cannot be installed here: {e}")


REWRITES = ("materialize_deletions", "compact", "migrate_2.2")


def _acceptable_refusals(manifest: dict, name: str, step: str) -> tuple[str, ...]:
    """Words of the typed refusals a step may end in on this dataset (each something this
    library does not do, checked to be refused rather than done wrongly); else it must be ok."""
    info = manifest["datasets"][name]
    release, kind = _release_key(manifest["release"]), info["kind"]
    kinds = {k for _, k in info["indices"]}
    out: list[str] = []
    if release < (0, 30) and step in REWRITES:
        if kind == "hnsw" and release < (0, 20):  # HNSW of <= 0.1x (pylance 14 cannot rewrite it either)
            out.append("that is or may be IVF_HNSW")
        if "INVERTED" in kinds:  # old-layout FTS behind the FRI
            out.append("a full-text index in the layout of pylance <= 0.2x")
    return tuple(out)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split(".")[:3])


def _check_release(release: str, tmp_path: Path, spark, names: list[str] | None = None) -> None:
    logging.getLogger("lance_spark_ops").setLevel(logging.WARNING)
    root, manifest = _data(release)
    problems: list[str] = []
    for name in names or sorted(manifest["datasets"]):
        src = root / name
        problems += [f"{release}/{name} read: {m}" for m in read_mismatches(str(src))]
        for step, result in maintain(spark, src, tmp_path / name).items():
            print(f"OUTCOME {release} {name} {step}: {result[:240]}")  # the outcome table (pytest -s)
            allowed = _acceptable_refusals(manifest, name, step)
            ok = result == "ok" or result.startswith(("not maintained: pylance 14 cannot read",
                                                      "refused (pylance 14 fails too)")) or (
                result.startswith("refused: UnsupportedError") and any(w in result for w in allowed))
            if not ok:
                problems.append(f"{release}/{name} {step}: {result[:300]}")
    if PYLANCE_FAILS:
        print("versions pylance 14 cannot read:", *PYLANCE_FAILS, sep="\n  ")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("release", make_envs.DEFAULT)
def test_default_releases(release: str, tmp_path: Path) -> None:
    # in-process tasks (spark=None): the maintenance logic without a Spark round trip
    _check_release(release, tmp_path, None)


@pytest.mark.slow
@pytest.mark.parametrize("release", list(make_envs.RELEASES))
def test_every_release(release: str, tmp_path: Path, spark) -> None:
    _check_release(release, tmp_path, spark)
