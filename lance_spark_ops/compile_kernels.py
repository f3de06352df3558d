"""``python -m lance_spark_ops.compile_kernels``: compile every numba kernel (FSST, k-means,
HNSW, MinHash, RaBitQ) into numba's cache now - a cluster's bootstrap step - so no job's first
task pays the compile (seconds per kernel module) on each worker of a fresh machine. Exit 1 when any is
unavailable (each then falls back to its numpy code, with a warning)."""

from __future__ import annotations

import sys
import time

from lance_spark_ops.encoding.compression import compiled
from lance_spark_ops.index.scalar import minhash
from lance_spark_ops.index.vector import hnsw, kmeans, rabitq

LOADERS = (("k-means", kmeans.compiled_kernels), ("FSST", compiled.load_kernels),
           ("HNSW", hnsw.compiled_kernels), ("MinHash", minhash.compiled_kernels),
           ("RaBitQ", rabitq.compiled_kernels))


def load_all() -> dict[str, tuple[bool, float]]:
    """Every kernel module compiled or loaded into this process: name -> (ready, seconds)."""
    out = {}
    for what, load in LOADERS:
        t0 = time.perf_counter()
        out[what] = (load() is not None, time.perf_counter() - t0)
    return out


def main() -> int:
    loaded = load_all()
    for what, (ready, seconds) in loaded.items():
        state = "ready" if ready else "unavailable"
        print(f"compiled {what} kernels {state} in {seconds:.1f} s", flush=True)
    return 0 if all(ready for ready, _ in loaded.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
