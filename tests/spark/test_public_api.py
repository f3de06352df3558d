"""The public API imports as documented: every name in ``__all__`` of ``lance_spark_ops`` and
``lance_spark_ops.spark`` is the same object however and whenever it is imported (no module
shadows a function of the same name), errors are all re-exported, and arguments are shaped
like pylance's."""

from __future__ import annotations

import inspect
import json
import pkgutil
import subprocess
import sys

import pytest

import lance_spark_ops
import lance_spark_ops.errors as errors_mod
from lance_spark_ops import spark as spark_pkg

_PROBE = r'''
import importlib, json, pkgutil, sys, types

PACKAGES = ("lance_spark_ops", "lance_spark_ops.spark")


def import_everything():
    import lance_spark_ops
    for info in pkgutil.walk_packages(lance_spark_ops.__path__, "lance_spark_ops."):
        importlib.import_module(info.name)


def look_up(pkg_name, name):
    """The name three ways: from-import, attribute of the package, attribute of its module."""
    scope = {}
    exec(f"from {pkg_name} import {name} as obj", scope)
    pkg = importlib.import_module(pkg_name)
    via_attr = getattr(pkg, name)
    owner = getattr(via_attr, "__module__", None)
    home = getattr(importlib.import_module(owner), name) if owner else via_attr
    return [scope["obj"], via_attr, home]


submodules_first = sys.argv[1] == "submodules-first"
if submodules_first:
    import_everything()
seen, report = {}, {}
for pkg_name in PACKAGES:
    names = importlib.import_module(pkg_name).__all__
    for name in names:
        seen[(pkg_name, name)] = look_up(pkg_name, name)
if not submodules_first:
    import_everything()
for (pkg_name, name), before in seen.items():
    after = look_up(pkg_name, name)
    objs = before + after
    report[f"{pkg_name}.{name}"] = {
        "same": all(o is objs[0] for o in objs),
        "module": any(isinstance(o, types.ModuleType) for o in objs),
    }
print(json.dumps(report))
'''


@pytest.mark.parametrize("order", ["package-first", "submodules-first"])
def test_every_public_name_is_one_object(order: str) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, order], capture_output=True, text=True, timeout=300,
                         check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(report) == {f"lance_spark_ops.{n}" for n in lance_spark_ops.__all__} | {
        f"lance_spark_ops.spark.{n}" for n in spark_pkg.__all__}
    assert {k: v for k, v in report.items() if not v["same"] or v["module"]} == {}


def test_documented_imports_give_functions() -> None:
    from lance_spark_ops.spark import (
        add_columns,
        compact,
        import_delta,
        materialize_deletions,
        rebuild_row_id_index,
        vacuum,
    )

    for fn in (add_columns, compact, materialize_deletions, rebuild_row_id_index, vacuum, import_delta):
        assert inspect.isfunction(fn), fn
    assert spark_pkg.compact is compact and spark_pkg.add_columns is add_columns
    assert spark_pkg.vacuum is vacuum and spark_pkg.import_delta is import_delta
    assert {"vacuum", "VacuumMetrics", "import_delta", "ImportMetrics"} <= set(spark_pkg.__all__)


def test_no_module_shares_a_public_name() -> None:
    """A submodule named like a public function would replace it on the package once imported."""
    for pkg in (lance_spark_ops, spark_pkg):
        modules = {info.name for info in pkgutil.iter_modules(pkg.__path__)}
        assert modules & set(pkg.__all__) == set(), pkg.__name__


def test_every_error_is_reexported_from_the_root() -> None:
    typed = {n for n, v in vars(errors_mod).items()
             if isinstance(v, type) and issubclass(v, errors_mod.LanceError)}
    assert typed <= set(lance_spark_ops.__all__)
    assert all(getattr(lance_spark_ops, n) is getattr(errors_mod, n) for n in typed)


def _public_callables() -> list[object]:
    from lance_spark_ops.row_id_index import lookup
    from lance_spark_ops.table.commit import commit_transaction

    out: list[object] = [lance_spark_ops.Dataset.open, lookup, commit_transaction]
    for pkg in (lance_spark_ops, spark_pkg):
        out += [getattr(pkg, n) for n in pkg.__all__ if callable(getattr(pkg, n))]
    return out


def test_storage_options_is_keyword_only() -> None:
    checked = list(_public_callables())
    for fn in checked:
        params = inspect.signature(fn).parameters  # type: ignore[arg-type]
        if "storage_options" in params:
            assert params["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY, fn


def test_no_test_hooks_in_public_signatures() -> None:
    for fn in _public_callables():
        assert "before_commit" not in inspect.signature(fn).parameters, fn  # type: ignore[arg-type]


def test_pylance_argument_order() -> None:
    from lance_spark_ops import write_dataset
    from lance_spark_ops.spark import compact

    assert list(inspect.signature(write_dataset).parameters)[:4] == ["data", "uri", "schema", "mode"]
    params = inspect.signature(compact).parameters
    assert list(params)[:3] == ["spark", "uri", "options"]
    assert params["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(spark_pkg.vacuum).parameters)[:2] == ["spark", "uri"]
    import_params = list(inspect.signature(spark_pkg.import_delta).parameters)
    assert import_params[:4] == ["spark", "delta_uri", "lance_uri", "mode"]


def test_compact_accepts_options_object_mapping_and_overrides(tmp_path) -> None:
    from lance_spark_ops.errors import InvalidInputError
    from lance_spark_ops.spark import CompactionOptions, compact
    from tests.spark.datasets import small_fragments

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", fragments=6)
    by_kwargs = compact(None, uri, target_rows_per_fragment=900, dry_run=True).plan
    assert by_kwargs and len(by_kwargs) < 6
    assert compact(None, uri, CompactionOptions(target_rows_per_fragment=900, dry_run=True)).plan == by_kwargs
    assert compact(None, uri, {"target_rows_per_fragment": 900}, dry_run=True).plan == by_kwargs
    assert compact(None, uri, CompactionOptions(target_rows_per_fragment=10), target_rows_per_fragment=900,
                   dry_run=True).plan == by_kwargs
    with pytest.raises(InvalidInputError, match="CompactionOptions or a mapping"):
        compact(None, uri, 900)
