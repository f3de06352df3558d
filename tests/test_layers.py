"""No module imports from a layer above its own (``docs/layers.md``): every ``import`` in
``lance_spark_ops`` - at module level, in functions, under ``TYPE_CHECKING`` - is parsed (ast)
and its target's layer compared with the importer's. ``LAYERS`` is the one place the order is
written down; a new top-level module or package must be placed in it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "lance_spark_ops"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# Lowest first. A module belongs to the entry naming the longest dotted prefix of its name
# (relative to the package; "" is the package's own __init__); it may import from its own layer
# and every layer before it, never from a later one.
LAYERS: tuple[tuple[str, ...], ...] = (
    # foundation: generated protobufs, errors, small helpers with no lance_spark_ops imports but these
    ("", "_pb", "errors", "_version", "_lazy", "_gc", "_heap", "kernels", "kernels_aot", "bin_packing",
     "concurrency", "config_file", "pb_wire"),
    ("io",),  # ObjectStore: every byte read or written
    ("file.schema",),  # the Lance logical schema (v0.1 codecs take its fields)
    ("encoding",),  # page codecs
    ("file",),  # Lance files: reader, writer, containers
    ("index",),  # index file formats and algorithms (no Spark; scalar, vector, fts)
    ("table",),  # datasets: manifests, fragments, commits, cleanup plans
    ("namespace", "row_id_index"),  # catalogs of tables; the row-id -> address index
    ("fleet",),  # health, policy and reports over many tables
    ("spark.runtime",),  # job scaffold, runner, session, CLI, config
    ("spark",),  # the Spark jobs by family: files, indices, fleet, datasource
    ("compile_kernels",),  # build tool: compiles every family's kernels
)


def _unit(module: str) -> str:
    """``module``'s dotted name inside the package ("" for the package itself)."""
    return module[len(PACKAGE) + 1 :] if module != PACKAGE else ""


def _layer(module: str) -> int | None:
    """Index in LAYERS of the longest entry prefixing ``module`` (None: no entry does)."""
    unit, best, found = _unit(module), -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            hit = unit == name if name == "" else unit == name or unit.startswith(name + ".")
            if hit and len(name) > best:
                best, found = len(name), i
    return found


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, target module) of every import of a package module in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for a in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in known else base))
    return [(line, t) for line, t in out if t == PACKAGE or t.startswith(PACKAGE + ".")]


def test_every_module_has_a_layer() -> None:
    missing = [m for m in _modules() if _layer(m) is None]
    assert not missing, f"modules in no layer of LAYERS (tests/test_layers.py): {missing}"


def test_no_import_from_a_higher_layer() -> None:
    modules = _modules()
    known = set(modules)
    upward: list[str] = []
    for module, path in modules.items():
        mine = _layer(module)
        for line, target in _imports(module, path, known):
            theirs = _layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line}: {module} (layer {mine}) imports "
                              f"{target} (layer {theirs})")
    upward = sorted(set(upward))
    assert not upward, "imports from a higher layer (docs/layers.md):\n" + "\n".join(upward)


def test_the_doc_shows_these_layers() -> None:
    """docs/layers.md's table: row i names (in backticks) the modules of LAYERS[i]."""
    import re

    rows = {}
    for line in (ROOT.parent / "docs" / "layers.md").read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if m:
            names = re.findall(r"`([^`]+)`", m.group(2))
            rows[int(m.group(1))] = {"" if n == "__init__" else n for n in names}
    assert rows == {i: set(names) for i, names in enumerate(LAYERS)}


def test_the_check_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The parser itself: an import inside a function and a relative one are both found."""
    f = tmp_path / "mod.py"
    f.write_text("def f():\n    from lance_spark_ops.spark.runtime import job\n\n"
                 "from ..table import dataset\n")
    got = _imports("lance_spark_ops.index.x", f, {"lance_spark_ops.spark.runtime.job",
                                                   "lance_spark_ops.table.dataset"})
    assert sorted(got) == [(2, "lance_spark_ops.spark.runtime.job"), (4, "lance_spark_ops.table.dataset")]
    assert _layer("lance_spark_ops.spark.runtime.job") > _layer("lance_spark_ops.index.x")
    assert _layer("lance_spark_ops.file.schema") < _layer("lance_spark_ops.encoding.v0_1.encode")
    assert _layer("lance_spark_ops.file.reader") > _layer("lance_spark_ops.encoding.v0_1.encode")
    assert _layer("lance_spark_ops") == 0 and _layer("lance_spark_ops.spark.files.compaction") == 10
