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

A kernel module opts in with ``AOT_EXPORTS``: ``{function name: numba signature}`` (arrays
only, ``void(f4[:, ::1], i8[::1])``), the signature its callers pass. An extension function does
not check its arguments, so each is called through a check (``_guarded``: dtype, dimensions,
layout, alignment); a call of other types goes to the jitted function, as before.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _cpu() -> str:
    """This machine's CPU as the compiler sees it (model and instruction-set flags), or ''
    when unknown (no ahead-of-time module then: it is built for this CPU)."""
    try:
        with open("/proc/cpuinfo") as f:  # the first processor's block only (a big machine's
            text = ""                     # whole file costs milliseconds to generate)
            while "\n\n" not in text and (chunk := f.read(4096)):
                text += chunk
    except OSError:
        return ""
    lines = text.split("\n\n", 1)[0].splitlines()
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


def _source(module: str) -> tuple[Path, bytes] | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    try:
        return Path(spec.origin), Path(spec.origin).read_bytes()
    except OSError:
        return None


def built_path(module: str) -> Path | None:
    """Where the ahead-of-time extension of kernel module ``module`` is (or would be) for this
    source, numba, Python and CPU; None when that cannot be told (source or CPU unknown)."""
    found, cpu = _source(module), _cpu()
    if found is None or not cpu:
        return None
    src, code = found
    key = hashlib.sha256(b"\0".join((code, _numba_version().encode(), cpu.encode(), sys.version.encode())))
    cache = os.environ.get("NUMBA_CACHE_DIR")
    where = Path(cache) if cache else src.parent / "__pycache__"
    return where / f"{extension_name(module)}-{key.hexdigest()[:20]}{SUFFIX}"


def declared_exports(code: bytes) -> dict[str, str]:
    """A kernel module's ``AOT_EXPORTS``, read from its source (importing it imports numba)."""
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "AOT_EXPORTS"
                                                for t in node.targets):
            got = ast.literal_eval(node.value)
            return got if isinstance(got, dict) else {}
    return {}


_DTYPES = {"f4": "float32", "f8": "float64", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
           "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "b1": "bool"}
_ARG = re.compile(r"^(\w+)\[([:, 1]*)\]$")


def array_args(signature: str) -> list[tuple[np.dtype, int, bool]] | None:
    """``void(f4[:, ::1], i8[::1])`` -> [(dtype, ndim, C-contiguous)] per argument; None for a
    signature of another form (scalars, other layouts, a result): not built ahead of time."""
    if not signature.startswith("void(") or not signature.endswith(")"):
        return None
    out = []
    for arg in re.split(r",\s*(?![^\[]*\])", signature[len("void("):-1].strip()):
        m = _ARG.match(arg.strip())
        if m is None or m.group(1) not in _DTYPES:
            return None
        dims = [d.strip() for d in m.group(2).split(",")]
        if any(d not in (":", "::1") for d in dims) or "::1" in dims[:-1]:
            return None
        out.append((np.dtype(_DTYPES[m.group(1)]), len(dims), dims[-1] == "::1"))
    return out


def _fits(args: tuple[Any, ...], want: list[tuple[np.dtype, int, bool]]) -> bool:
    return len(args) == len(want) and all(
        isinstance(a, np.ndarray) and a.dtype == dt and a.dtype.isnative and a.ndim == nd and a.flags.aligned
        and (a.flags.c_contiguous or not c) for a, (dt, nd, c) in zip(args, want, strict=True))


def _guarded(module: str, fn: str, compiled: Any, want: list[tuple[np.dtype, int, bool]]) -> Any:
    """``compiled`` called only with the argument types it was built for (an extension function
    does not check them: another dtype or layout reads memory wrongly, or crashes); any other
    call goes to the jitted function (numba compiles it for those types, as before)."""
    def call(*args: Any) -> Any:
        if _fits(args, want):
            return compiled(*args)
        return getattr(importlib.import_module(module), fn)(*args)

    call.__name__ = fn
    return call


def load_built(module: str) -> ModuleType | None:
    """The functions ``build`` compiled for ``module`` here, from its extension (no numba
    import), each behind a check of its argument types (``_guarded``); None when there is no
    extension for this source / numba / CPU, it does not load, or it lacks an export."""
    path = built_path(module)
    found = _source(module)
    if path is None or found is None or not path.is_file():
        return None
    exports = {fn: array_args(sig) for fn, sig in declared_exports(found[1]).items()}
    if not exports or any(want is None for want in exports.values()):
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
    out = ModuleType(name, f"{module} built ahead of time ({path.name})")
    out.__file__ = str(path)
    for fn, want in exports.items():
        compiled = getattr(ext, fn, None)
        if compiled is None or want is None:
            return None
        setattr(out, fn, _guarded(module, fn, compiled, want))
    return out


def build(module: str) -> Path | None:
    """Compile ``module``'s ``AOT_EXPORTS`` into the extension ``load_built`` finds; returns its
    path, or None when the module has no exports, a signature is not of ``array_args``' form or
    the functions' options differ (one set of flags per extension). Raises what numba,
    setuptools or the C compiler raise."""
    kernels = importlib.import_module(module)
    exports: dict[str, str] = getattr(kernels, "AOT_EXPORTS", {})
    path = built_path(module)
    if not exports or path is None or any(array_args(sig) is None for sig in exports.values()):
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

