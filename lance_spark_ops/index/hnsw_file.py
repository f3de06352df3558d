"""``index.idx`` of an IVF_HNSW_* index (no I/O): the partitions' HNSW graphs as rows.

Layout (as pylance 14 writes it; Lance ``HNSW::to_batch`` and the IVF v2 builder's
``merge_partitions``): columns ``__vector_id`` (uint32), ``__neighbors`` (list<uint32>),
``_distance`` (list<float32>); per partition, level 0 then level 1 ... each level's nodes in
ascending id, rows of partition p at ``IVF.offsets[p]`` (``IVF.lengths[p]`` rows; the IVF
protobuf in the global buffer named by ``lance:ivf``, with the centroids). The schema metadata
``lance:hnsw`` is a JSON list with one JSON string per partition: ``entry_point``, ``params``
(``HnswBuildParams``) and ``level_offsets`` (``max_level + 1`` row offsets within the
partition); an empty partition has ``""`` and no rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.hnsw import Graph, Params, Space, build
from lance_spark_ops.index.ivf import INDEX_FILE

HNSW_KEY = b"lance:hnsw"


def partition_params(schema: pa.Schema) -> list[Params | None]:
    """Each partition's build parameters (None for an empty partition)."""
    raw = (schema.metadata or {}).get(HNSW_KEY)
    if raw is None:
        raise CorruptFileError(f"{INDEX_FILE}: schema metadata {HNSW_KEY.decode()} is missing")
    try:
        return [Params.from_json(json.loads(m)["params"]) if m else None for m in json.loads(raw)]
    except (ValueError, TypeError, KeyError) as e:
        raise CorruptFileError(f"{INDEX_FILE}: {HNSW_KEY.decode()} does not parse ({e})") from e


def graph_table(graphs: Iterable[Graph], schema: pa.Schema) -> tuple[pa.Table, list[int], list[str]]:
    """The rows of every partition's graph, their counts, and the partitions' metadata."""
    ids, neighbors, dists, lengths, metas = [], [], [], [], []
    for g in graphs:
        n = 0
        for lv in g.levels:
            ids.append(lv.nodes)
            neighbors.extend(lv.neighbors)
            dists.extend(lv.distances)
            n += lv.nodes.size
        lengths.append(n)
        metas.append(g.metadata())
    flat_n = np.concatenate(neighbors) if neighbors else np.zeros(0, np.uint32)
    flat_d = np.concatenate(dists) if dists else np.zeros(0, np.float32)
    offsets = np.concatenate([[0], np.cumsum([a.size for a in neighbors])]).astype(np.int32)
    fields = [schema.field(i) for i in range(3)]
    cols = [pa.array(np.concatenate(ids) if ids else np.zeros(0, np.uint32), fields[0].type),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat_n, pa.uint32())).cast(fields[1].type),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat_d, pa.float32())).cast(fields[2].type)]
    meta = dict(schema.metadata or {})
    meta[HNSW_KEY] = json.dumps(metas, separators=(",", ":")).encode()
    return pa.Table.from_arrays(cols, schema=schema.with_metadata(meta)), lengths, metas


def rebuild(spaces: Iterable[Space], schema: pa.Schema, ivf: index_pb2.IVF) -> tuple[pa.Table, index_pb2.IVF]:
    """``index.idx``'s table and IVF protobuf for graphs rebuilt on ``spaces`` (one per partition),
    with each partition's old build parameters (defaults for a partition that was empty)."""
    params = partition_params(schema)
    fallback = next((p for p in params if p is not None), Params())
    graphs = (build(s, params[i] if i < len(params) and params[i] is not None else fallback, i)
              for i, s in enumerate(spaces))
    table, lengths, _ = graph_table(graphs, schema)
    out = index_pb2.IVF()
    out.CopyFrom(ivf)
    del out.offsets[:]
    del out.lengths[:]
    out.offsets.extend(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64).tolist()
                       if lengths else [])
    out.lengths.extend(lengths)
    return table, out
