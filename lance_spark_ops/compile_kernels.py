"""``python -m lance_spark_ops.compile_kernels``: compile every numba kernel (FSST, k-means,
HNSW, MinHash, RaBitQ) into numba's cache now - a cluster's bootstrap step - so no job's first
task pays the compile (seconds per kernel module) on each worker of a fresh machine; and build
the modules that declare ``AOT_EXPORTS`` (k-means, RaBitQ) ahead of time for this machine
(``kernels_aot``), so that a worker loads them without importing numba. Exit 1 when a kernel
family is unavailable (it then falls back to its numpy code, with a warning); an ahead-of-time
build that fails is reported, and the jitted kernels run instead."""

from __future__ import annotations

import sys
import time

from lance_spark_ops import kernels_aot
from lance_spark_ops.encoding.compression import compiled
from lance_spark_ops.index.scalar import minhash
from lance_spark_ops.index.vector import hnsw, kmeans, rabitq

LOADERS = (("k-means", kmeans.compiled_kernels), ("FSST", compiled.load_kernels),
           ("HNSW", hnsw.compiled_kernels), ("MinHash", minhash.compiled_kernels),
           ("RaBitQ", rabitq.compiled_kernels))
# the kernel modules built ahead of time (those with ``AOT_EXPORTS``)
AHEAD = (("k-means", "lance_spark_ops.index.vector.kmeans_kernels"),
         ("RaBitQ", "lance_spark_ops.index.vector.rabitq_kernels"))


def load_all() -> dict[str, tuple[bool, float]]:
    """Every kernel module compiled or loaded into this process: name -> (ready, seconds)."""
    out = {}
    for what, load in LOADERS:
        t0 = time.perf_counter()
        out[what] = (load() is not None, time.perf_counter() - t0)
    return out


def build_ahead() -> dict[str, tuple[str, float]]:
    """``AHEAD``'s extensions built for this machine unless already there (older builds of
    them removed): name -> (state, seconds)."""
    out = {}
    for what, module in AHEAD:
        t0 = time.perf_counter()
        path = kernels_aot.built_path(module)
        if path is not None and path.is_file():
            state = "ready"
        else:
            try:
                state = "built" if kernels_aot.build(module) is not None else "unavailable (no CPU id)"
            except Exception as e:  # noqa: BLE001 - setuptools or a C compiler missing: numba jits them
                state = f"unavailable ({type(e).__name__}: {e})"
        kernels_aot.remove_stale(module)
        out[what] = (state, time.perf_counter() - t0)
    return out


def main() -> int:
    loaded = load_all()
    for what, (ready, seconds) in loaded.items():
        state = "ready" if ready else "unavailable"
        print(f"compiled {what} kernels {state} in {seconds:.1f} s", flush=True)
    for what, (state, seconds) in build_ahead().items():
        print(f"ahead-of-time {what} kernels {state} in {seconds:.1f} s", flush=True)
    return 0 if all(ready for ready, _ in loaded.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
