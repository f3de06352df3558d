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


def main() -> int:
    ok = True
    for what, load in (("FSST", compiled.load_kernels), ("k-means", kmeans.compiled_kernels),
                       ("HNSW", hnsw.compiled_kernels), ("MinHash", minhash.compiled_kernels),
                       ("RaBitQ", rabitq.compiled_kernels)):
        t0 = time.perf_counter()
        ready = load() is not None
        ok &= ready
        state = "ready" if ready else "unavailable"
        print(f"compiled {what} kernels {state} in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
