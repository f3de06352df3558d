"""Vector index algorithms and files (no I/O, no Spark): k-means (``kmeans``), PQ / SQ
(``quantizers``), IVF models and storage (``ivf_model``, ``ivf``, ``ivf_build``), HNSW graphs
(``hnsw``, ``hnsw_file``), and the decisions of a build as pure functions, each unit-tested
without Spark: parameters (``ivf_params``), what is trained on how many rows (``ivf_train``),
how the work is cut into tasks (``ivf_plan``), an optimize's splits (``ivf_split``) and joins
(``ivf_join``), and the drift measure (``drift``). The Spark side plans, ships and assembles:
``spark.indices.vector_index``."""
