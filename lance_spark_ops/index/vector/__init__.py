"""Vector index algorithms and files (no I/O): k-means, PQ / SQ, IVF models and storage, HNSW graphs,
the joins of an optimize."""
