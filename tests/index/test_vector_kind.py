"""Index kinds are parsed in one place (``index.kinds.VectorKind``): every vector type's parts,
a typed refusal for other names, and no other module taking a kind's name apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lance_spark_ops
from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.kinds import VECTOR_KINDS, VectorKind, is_hnsw


@pytest.mark.parametrize(("name", "quantizer", "hnsw"), [
    ("IVF_FLAT", "FLAT", False), ("IVF_PQ", "PQ", False), ("IVF_SQ", "SQ", False), ("IVF_RQ", "RQ", False),
    ("IVF_HNSW_FLAT", "FLAT", True), ("IVF_HNSW_SQ", "SQ", True), ("IVF_HNSW_PQ", "PQ", True)])
def test_parse(name: str, quantizer: str, hnsw: bool) -> None:
    kind = VectorKind.parse(name)
    assert (kind.name, kind.quantizer, kind.hnsw) == (name, quantizer, hnsw)
    assert is_hnsw(name) is hnsw


def test_every_vector_kind_parses_and_others_are_refused() -> None:
    assert {VectorKind.parse(k).name for k in VECTOR_KINDS} == set(VECTOR_KINDS)
    for bad in ("BTREE", "IVF_HNSW_RQ", "ivf_pq", "IVF", ""):
        with pytest.raises(InvalidInputError):
            VectorKind.parse(bad)
        assert not is_hnsw(bad)


# a kind's name taken apart by string operations: rsplit/split on "_", prefix / suffix tests on IVF names
_PARSING = re.compile(r"""\.r?split\(\s*["']_["']|\.(startswith|endswith)\(\s*["'](IVF|HNSW|PQ|SQ|RQ|FLAT)""")


def test_no_kind_string_parsing_outside_the_parser() -> None:
    root = Path(lance_spark_ops.__file__).parent
    hits = [f"{p.relative_to(root)}:{n}: {line.strip()}"
            for p in root.rglob("*.py") if "_pb" not in p.parts and p.name != "kinds.py"
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if _PARSING.search(line)]
    assert not hits, "\n".join(hits)
