"""Storage options (credentials) never show in the reprs of the Spark side's dataclasses (task
specs, parsed command lines): task errors and logs print them."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import lance_spark_ops.spark as spark_pkg

SECRET = "sEcReT-4f1c9e"  # noqa: S105 - a marker, not a credential


def _specs_with_storage_options() -> list[type]:
    out = []
    for info in pkgutil.walk_packages(spark_pkg.__path__, f"{spark_pkg.__name__}."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (dataclasses.is_dataclass(obj) and isinstance(obj, type) and obj.__module__ == module.__name__
                    and any("storage_options" in f.name for f in dataclasses.fields(obj))):
                out.append(obj)
    return out


def _with_secret(cls: type) -> object:
    """An instance whose storage options hold SECRET (other fields: placeholders)."""
    kwargs = {f.name: {"aws_secret_access_key": SECRET} if "storage_options" in f.name else f"x-{f.name}"
              for f in dataclasses.fields(cls) if f.init}
    return cls(**kwargs)


def test_no_spec_repr_shows_storage_options() -> None:
    specs = _specs_with_storage_options()
    names = {c.__name__ for c in specs}
    assert {"RewriteSpec", "ColumnWriteSpec", "SequenceSpec", "ScanSpec", "ImportSpec", "ListTask",
            "ReadManifestsTask", "DeleteTask"} <= names
    for cls in specs:
        spec = _with_secret(cls)
        assert getattr(spec, next(f.name for f in dataclasses.fields(cls) if "storage_options" in f.name))
        assert SECRET not in repr(spec), cls.__name__
        assert SECRET not in str(spec), cls.__name__
