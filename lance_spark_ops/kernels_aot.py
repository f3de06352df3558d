"""Kernel modules compiled ahead of time (numba's ``pycc``) into a Python extension per machine,
loaded without numba.

Loading a kernel from numba's on-disk cache still imports numba and refreshes its CPU target
context (its typing and lowering registries): 0.5-1.5 s in every new Python worker, which a
fresh Spark session's first vector job pays in each of its workers (``bench/first_job_bench.py``).
The same functions built by ``pycc`` with the same options (``fastmath``, ``nogil``: the
dispatcher's) and for this CPU load in about a millisecond and give the same results bit for
bit. ``build`` runs in ``python -m lance_spark_ops.compile_kernels`` (a cluster's bootstrap step,
seconds per module; it needs setuptools and a C compiler); ``load_built`` finds the extension
again only while the kernel source, numba's version and the CPU are the ones it was built for
(else the numba-jitted kernels run, as without it).

A kernel module opts in with ``AOT_EXPORTS``: ``{function name: numba signature}``, the
signature every caller passes (an extension function refuses other argument types).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _cpu() -> str:
    """This machine's CPU as the compiler sees it (model and instruction-set flags), or ''
    when unknown (no ahead-of-time module then: it is built for this CPU)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().split("\n\n", 1)[0].splitlines()
    except OSError:
        return ""
    keep = [ln.split(":", 1)[1].strip() for ln in lines
            if ln.split(":", 1)[0].strip() in ("vendor_id", "model name", "flags")]
    return "|".join(keep)


def _numba_version() -> str:
    """The installed numba's version file, hashed, read without importing numba."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.origin:
        return ""
    try:
        return hashlib.sha256((Path(spec.origin).parent / "_version.py").read_bytes()).hexdigest()
    except OSError:
        return ""


def extension_name(module: str) -> str:
    """The extension's module name (its ``PyInit_`` symbol): the kernel module's own name + _aot."""
    return module.rsplit(".", 1)[-1] + "_aot"


def built_path(module: str) -> Path | None:
    """Where the ahead-of-time extension of kernel module ``module`` is (or would be) for this
    source, numba, Python and CPU; None when that cannot be told (source or CPU unknown)."""
    spec = importlib.util.find_spec(module)
    cpu = _cpu()
    if spec is None or not spec.origin or not cpu:
        return None
    src = Path(spec.origin)
    try:
        code = src.read_bytes()
    except OSError:
        return None
    key = hashlib.sha256(b"\0".join((code, _numba_version().encode(), cpu.encode(), sys.version.encode())))
    cache = os.environ.get("NUMBA_CACHE_DIR")
    where = Path(cache) if cache else src.parent / "__pycache__"
    return where / f"{extension_name(module)}-{key.hexdigest()[:20]}{SUFFIX}"


def load_built(module: str) -> ModuleType | None:
    """The extension ``build`` made for ``module`` here, imported (no numba import), or None
    when there is none for this source / numba / CPU or it does not load."""
    path = built_path(module)
    if path is None or not path.is_file():
        return None
    name = extension_name(module)
    try:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        if spec is None:
            return None
        ext = importlib.util.module_from_spec(spec)
        loader.exec_module(ext)
    except (ImportError, OSError):
        return None
    return ext


def build(module: str) -> Path | None:
    """Compile ``module``'s ``AOT_EXPORTS`` into the extension ``load_built`` finds; returns its
    path, or None when the module has no exports or its functions' options differ (one set of
    flags per extension). Raises what numba, setuptools or the C compiler raise."""
    kernels = importlib.import_module(module)
    exports: dict[str, str] = getattr(kernels, "AOT_EXPORTS", {})
    path = built_path(module)
    if not exports or path is None:
        return None
    options = [dict(getattr(kernels, fn).targetoptions) for fn in exports]
    if any(o != options[0] for o in options):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending deprecation
        from numba.pycc import CC
        from numba.pycc import compiler as pycc_compiler

    cc = CC(extension_name(module))
    cc.target_cpu = "host"
    cc.verbose = False
    for fn, signature in exports.items():
        cc.export(fn, signature)(getattr(kernels, fn).py_func)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        cc.output_dir = tmp
        with _flags(pycc_compiler, options[0]):
            cc.compile()
        (made,) = Path(tmp).glob(f"{extension_name(module)}*{SUFFIX}")
        os.replace(made, path)  # atomic: a loader sees the whole file or none
    return path


class _flags:
    """pycc's compiler given the jit options (``fastmath``, ``nogil``) of the functions it
    builds: it compiles with numba's default flags otherwise (no fastmath: other rounding)."""

    def __init__(self, compiler: Any, options: dict[str, Any]) -> None:
        self.compiler, self.options, self.saved = compiler, options, compiler.Flags

    def __enter__(self) -> None:
        from numba.core.cpu import FastMathOptions

        base, options = self.saved, self.options

        class Flags(base):  # type: ignore[misc, valid-type]
            def __init__(self, *a: Any, **k: Any) -> None:
                super().__init__(*a, **k)
                if options.get("fastmath"):
                    self.fastmath = FastMathOptions(options["fastmath"])
                if options.get("nogil"):
                    self.release_gil = True
                if "boundscheck" in options:
                    self.boundscheck = options["boundscheck"]
                if "error_model" in options:
                    self.error_model = options["error_model"]

        self.compiler.Flags = Flags

    def __exit__(self, *exc: object) -> None:
        self.compiler.Flags = self.saved


def remove_stale(module: str) -> int:
    """Delete this module's extensions built for another source / numba / CPU beside the
    current one; returns how many."""
    path = built_path(module)
    if path is None or not path.parent.is_dir():
        return 0
    gone = 0
    for old in path.parent.glob(f"{extension_name(module)}-*{SUFFIX}"):
        if old != path:
            try:
                old.unlink()
                gone += 1
            except OSError:
                pass
    return gone

