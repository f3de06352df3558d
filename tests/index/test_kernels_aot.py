"""Kernels built ahead of time (``kernels_aot``): the k-means extension gives the jitted kernel's
results bit for bit, loads without importing numba, is found only for its own source / CPU, and a broken
one leaves the jitted kernels in charge."""

from __future__ import annotations

import importlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lance_spark_ops import kernels, kernels_aot

KMEANS = "lance_spark_ops.index.vector.kmeans_kernels"


@pytest.fixture(scope="module")
def built() -> object:
    """The k-means extension (built here when the bootstrap step did not: once per machine)."""
    path = kernels_aot.built_path(KMEANS)
    if path is None:
        pytest.skip("no CPU id on this platform: nothing is built ahead of time")
    if not path.is_file() and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: pycc cannot link the extension")
    if not path.is_file():
        assert kernels_aot.build(KMEANS) == path
    ext = kernels_aot.load_built(KMEANS)
    assert ext is not None and ext.__name__ == "kmeans_kernels_aot"
    return ext


def _run(f: object, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
    n = x.shape[0]
    ids, best, second = np.empty(n, np.int64), np.empty(n, np.float32), np.empty(n, np.float32)
    c_sq = np.einsum("ij,ij->i", c, c).astype(np.float32)
    f(x, np.ascontiguousarray(c.T), c_sq, ids, best, second)  # type: ignore[operator]
    return ids, best, second


@pytest.mark.parametrize("dim,n", [(4, 1000), (8, 2049), (16, 77)])
def test_ahead_of_time_equals_jitted(built: object, dim: int, n: int) -> None:
    """nearest2 built by pycc with the dispatcher's options (fastmath, nogil) gives the jitted
    nearest2's ids and both scores bit for bit: rows on a centroid, between two, a duplicate
    centroid, a short last block."""
    jitted = importlib.import_module(KMEANS)
    rng = np.random.default_rng(dim)
    c = rng.normal(size=(256, dim)).astype(np.float32)
    c[9] = c[3]
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x[:20] = c[rng.integers(0, 256, 20)]
    x[20:40] = (c[10] + c[11]) / 2
    want = _run(jitted.nearest2, x, c)
    got = _run(built.nearest2, x, c)  # type: ignore[attr-defined]
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    assert (got[0][:20] == np.argmin(((x[:20, None] - c[None]) ** 2).sum(axis=2), axis=1)).all()


def test_other_argument_types_go_to_the_jitted_kernel(built: object) -> None:
    """The extension is called only with the types it was built for: float64 rows, Fortran
    order or a strided view (which it would misread) get the jitted kernel's answer; read-only
    inputs are fine. Signatures of other forms are not built ahead of time."""
    rng = np.random.default_rng(3)
    c = rng.normal(size=(32, 8)).astype(np.float32)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    want = _run(importlib.import_module(KMEANS).nearest2, x, c)
    readonly = np.frombuffer(x.tobytes(), np.float32).reshape(x.shape)
    for other in (x.astype(np.float64), np.asfortranarray(x), readonly):
        got = _run(built.nearest2, other, c)  # type: ignore[attr-defined]
        np.testing.assert_array_equal(got[0], want[0])
    wide = np.zeros((600, 8), np.float32)
    wide[::2] = x
    np.testing.assert_array_equal(_run(built.nearest2, wide[::2], c)[0], want[0])  # type: ignore[attr-defined]
    assert kernels_aot.array_args("void(f4[:, ::1], i8[::1])") == [(np.dtype(np.float32), 2, True),
                                                                  (np.dtype(np.int64), 1, True)]
    for other_form in ("void(f4[:, :], i8)", "f4(f4[::1])", "void(f4[::1, :])", "void(c8[::1])"):
        assert kernels_aot.array_args(other_form) is None


def test_ahead_of_time_loads_without_numba(built: object) -> None:
    """k-means' compiled kernels in a new process are the extension, numba is not imported, and
    they assign as the float64 argmin does."""
    script = (
        "import sys\nimport numpy as np\n"
        "from lance_spark_ops.index.vector import kmeans\n"
        "k = kmeans.compiled_kernels()\nassert k.__name__ == 'kmeans_kernels_aot', k\n"
        "assert 'numba' not in sys.modules\n"
        "rng = np.random.default_rng(1)\n"
        "x = rng.normal(size=(500, 8)).astype(np.float32); c = rng.normal(size=(64, 8)).astype(np.float32)\n"
        "ids, _ = kmeans.assign(x, c, 'l2')\n"
        "d = ((x[:, None].astype(np.float64) - c[None]) ** 2).sum(axis=2)\n"
        "assert (ids == d.argmin(axis=1)).all()\nprint('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_built_path_names_source_cpu_and_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension's name changes with the kernel source and the CPU; none without a CPU id;
    NUMBA_CACHE_DIR places it; a missing or other-key file is not loaded, and remove_stale
    deletes only the other keys' files."""
    (tmp_path / "pkg_k").mkdir()
    src = tmp_path / "pkg_k" / "some_kernels.py"
    src.write_text("AOT_EXPORTS = {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    importlib.invalidate_caches()
    first = kernels_aot.built_path("pkg_k.some_kernels")
    assert first is not None and first.parent == src.parent / "__pycache__"
    assert first.name.startswith("some_kernels_aot-") and first.name.endswith(kernels_aot.SUFFIX)
    src.write_text("AOT_EXPORTS = {}  # changed\n")
    changed = kernels_aot.built_path("pkg_k.some_kernels")
    assert changed is not None and changed.name != first.name
    monkeypatch.setattr(kernels_aot, "_cpu", lambda: "another cpu")
    other_cpu = kernels_aot.built_path("pkg_k.some_kernels")
    assert other_cpu is not None and other_cpu.name not in (first.name, changed.name)
    monkeypatch.setattr(kernels_aot, "_cpu", lambda: "")
    assert kernels_aot.built_path("pkg_k.some_kernels") is None
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    placed = kernels_aot.built_path("pkg_k.some_kernels")
    assert placed is not None and placed.parent == tmp_path / "cache"
    assert kernels_aot.load_built("pkg_k.some_kernels") is None  # not built
    placed.parent.mkdir()
    stale = placed.with_name("some_kernels_aot-0000" + kernels_aot.SUFFIX)
    stale.write_bytes(b"not an extension")
    placed.write_bytes(b"not an extension either")
    assert kernels_aot.load_built("pkg_k.some_kernels") is None  # does not load: None, no raise
    assert kernels_aot.remove_stale("pkg_k.some_kernels") == 1
    assert placed.is_file() and not stale.exists()
    assert kernels_aot.build("pkg_k.some_kernels") is None  # nothing to export


def test_broken_ahead_of_time_module_falls_back_to_numba(monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """An extension that fails its warm-up call is set aside with a warning; the jitted kernels
    load instead. LSO_NO_COMPILED turns both off."""
    def bad(*_: object) -> None:
        raise TypeError("no matching signature")

    monkeypatch.setattr(kernels_aot, "load_built", lambda module: SimpleNamespace(nearest2=bad))
    from lance_spark_ops.index.vector import kmeans

    with caplog.at_level(logging.WARNING, logger="lance_spark_ops.kernels"):
        got = kernels.load(KMEANS, kmeans._warm, "k-means")
    assert got is importlib.import_module(KMEANS)
    assert "ahead-of-time k-means kernels unusable" in caplog.text
    monkeypatch.setenv("LSO_NO_COMPILED", "1")
    assert kernels.load(KMEANS, kmeans._warm, "k-means") is None


RABITQ = "lance_spark_ops.index.vector.rabitq_kernels"


@pytest.mark.parametrize("metric", ["l2", "dot"])
def test_rabitq_ahead_of_time_equals_jitted(metric: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The RaBitQ extension (its four kernels, scalars in small arrays) gives the jitted kernels'
    codes, ex codes and factors bit for bit, through ``rabitq.encode_assigned`` / ``encode``,
    every call with the types it was built for (none going to the jitted kernel)."""
    from lance_spark_ops.index.vector import rabitq

    path = kernels_aot.built_path(RABITQ)
    if path is None or (not path.is_file() and shutil.which("cc") is None and shutil.which("gcc") is None):
        pytest.skip("nothing built ahead of time here (no CPU id or no C compiler)")
    if not path.is_file():
        assert kernels_aot.build(RABITQ) == path
    ext = kernels_aot.load_built(RABITQ)
    assert ext is not None and ext.__name__ == "rabitq_kernels_aot"
    rabitq._warm(ext)
    jitted = importlib.import_module(RABITQ)
    fits = kernels_aot._fits
    seen: list[bool] = []
    monkeypatch.setattr(kernels_aot, "_fits", lambda args, want: seen.append(fits(args, want)) or seen[-1])
    rng = np.random.default_rng(5)
    model = rabitq.new_model(40, 5, seed=2)  # not a power of two: the alternating transform
    x = rng.normal(size=(300, 40)).astype(np.float32)
    cents = rng.normal(size=(3, 40)).astype(np.float32)
    parts = rng.integers(0, 3, 300)
    out = []
    for k in (jitted, ext):
        rabitq._loaded[:] = [k]
        try:
            fused = rabitq.encode_assigned(model, x, cents, parts, metric)
            res = (x - cents[parts]).astype(np.float32)
            rot = rabitq.rotate(model, cents)[parts]
            plain = rabitq.encode(model, res, rot, rabitq.l2_norm_square(res), metric)
        finally:
            rabitq._loaded.clear()
        out.append((fused, plain))
    assert len(seen) >= 5 and all(seen)  # rotate x3, encode_rows, ex_codes, factors: all built ones
    for (a, b), (c, d) in [(out[0], out[1])]:
        for f in ("codes", "add", "scale", "error", "ex_codes", "ex_add", "ex_scale"):
            np.testing.assert_array_equal(getattr(a, f), getattr(c, f), err_msg=f)
            np.testing.assert_array_equal(getattr(b, f), getattr(d, f), err_msg=f)
