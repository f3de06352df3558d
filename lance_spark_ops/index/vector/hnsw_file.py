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
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.vector.hnsw import Graph, Params, Space, build
from lance_spark_ops.index.vector.ivf import INDEX_FILE

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


def checked_params(schema: pa.Schema, kept: Sequence[bool], ivf: index_pb2.IVF) -> list[Params | None]:
    """The partitions' build parameters, checked against the IVF and the storage."""
    params = partition_params(schema)
    if len(params) != len(kept) or len(ivf.lengths) != len(kept):
        raise CorruptFileError(f"{INDEX_FILE}: {len(params)} partitions in {HNSW_KEY.decode()}, "
                               f"{len(ivf.lengths)} in its IVF, {len(kept)} in the storage")
    return params


def rebuild_partition(space: Space, params: Sequence[Params | None], p: int,
                      schema: pa.Schema) -> tuple[pa.Table, str]:
    """Partition p's graph rebuilt on ``space``: its rows and its ``lance:hnsw`` entry. The
    level draw is seeded by p, so any task building p builds the same graph."""
    fallback = next((x for x in params if x is not None), Params())
    g = build(space, params[p] or fallback, p)
    return _rows(g, schema), g.metadata()


def assemble(table: pa.Table, ivf: index_pb2.IVF, kept: Sequence[bool],
             built: dict[int, tuple[pa.Table, str]]) -> tuple[pa.Table, index_pb2.IVF]:
    """The new ``index.idx`` table and IVF: kept partitions' rows and entries from the old
    ``table``, the others from ``built`` (partition -> (rows, entry))."""
    schema = table.schema
    old_meta = json.loads(schema.metadata[HNSW_KEY])
    pieces, lengths, metas = [], [], []
    for p, same in enumerate(kept):
        if same:
            pieces.append(table.slice(int(ivf.offsets[p]), int(ivf.lengths[p])))
            metas.append(old_meta[p])
        else:
            rows, entry = built[p]
            pieces.append(rows)
            metas.append(entry)
        lengths.append(pieces[-1].num_rows)
    meta = dict(schema.metadata or {})
    meta[HNSW_KEY] = json.dumps(metas, separators=(",", ":")).encode()
    out_schema = schema.with_metadata(meta)
    out_table = pa.concat_tables([t.cast(out_schema) for t in pieces]).replace_schema_metadata(meta) \
        if pieces else out_schema.empty_table()
    out = index_pb2.IVF()
    out.CopyFrom(ivf)
    del out.offsets[:]
    del out.lengths[:]
    out.offsets.extend(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64).tolist()
                       if lengths else [])
    out.lengths.extend(lengths)
    return out_table, out


def _rows(g: Graph, schema: pa.Schema) -> pa.Table:
    """A graph's rows, level 0 first (``HNSW::to_batch``)."""
    fields = [schema.field(i) for i in range(3)]
    if not g.levels:
        return pa.schema(fields).empty_table()
    ids = np.concatenate([lv.nodes for lv in g.levels])
    neighbors = np.concatenate([lv.neighbors for lv in g.levels])
    dists = np.concatenate([lv.distances for lv in g.levels])
    # each level's offsets shifted by the edges of the levels before it
    ends = np.cumsum([lv.neighbors.size for lv in g.levels])
    offsets = np.concatenate([[0]] + [lv.offsets[1:] + (ends[k - 1] if k else 0)
                                      for k, lv in enumerate(g.levels)]).astype(np.int32)
    offs = pa.array(offsets)
    cols = [pa.array(ids, fields[0].type),
            pa.ListArray.from_arrays(offs, pa.array(neighbors, pa.uint32())).cast(fields[1].type),
            pa.ListArray.from_arrays(offs, pa.array(dists, pa.float32())).cast(fields[2].type)]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))
