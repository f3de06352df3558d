"""Issue #38's contracts, checked on the source: index builders are never probed for what they
can do (the builder protocol declares it), and an index type's name is taken apart in one place
(``index.kinds.VectorKind.parse``), never by string surgery elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lance_spark_ops"
KIND_PARSER = PACKAGE / "index" / "kinds.py"

# a kind's name cut apart: its suffix split off, its quantizer or prefix tested as text
KIND_SURGERY = re.compile(r"""rsplit\(\s*["']_["']|split\(\s*["']_["']\s*\)\s*\[\s*-"""
                          r"""|\.endswith\(\s*["']_?(PQ|SQ|RQ|FLAT|HNSW)["']"""
                          r"""|\.startswith\(\s*["'](IVF|HNSW)|\[\s*len\(\s*["']IVF""")


def _sources(*tops: Path) -> list[Path]:
    return sorted(p for top in tops for p in top.rglob("*.py"))


def _hits(pattern: re.Pattern[str], files: list[Path]) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]


def test_no_capability_probing_in_index_builds() -> None:
    """Builders, segments and index tasks are called through their declared protocol: no
    ``hasattr`` anywhere in the index code (Spark side and format side)."""
    files = _sources(PACKAGE / "spark" / "indices", PACKAGE / "index")
    assert files
    assert _hits(re.compile(r"\bhasattr\("), files) == []


def test_kind_names_are_parsed_in_one_place() -> None:
    files = [p for p in _sources(PACKAGE, ROOT / "jobs") if p != KIND_PARSER]
    assert _hits(KIND_SURGERY, [KIND_PARSER])  # the pattern sees the parser's own parse
    assert _hits(KIND_SURGERY, files) == []
