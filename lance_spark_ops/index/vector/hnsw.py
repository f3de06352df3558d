"""HNSW graph of one IVF partition, rebuilt from its (remapped) vector storage (no I/O).

Lance cannot remap an HNSW graph in place (its node ids are storage positions, which change
when rows are dropped): its ``HNSW::remap`` rebuilds the graph from the remapped storage with
the old build parameters. This module does the same, vectorised instead of inserting node by
node:

* levels: HNSW's distribution ``floor(-ln U / ln m)`` capped at ``max_level - 1``, drawn from
  an RNG seeded by the partition id (the output is deterministic); the entry point is the
  first node of the top level;
* at each level, each node's candidates are its ``ef_construction`` exact nearest nodes of
  that level (blockwise brute force: quadratic in the level's size, memory bounded by
  ``BLOCK_CELLS`` per block), from which Lance's ``select_neighbors_heuristic`` keeps at most
  ``m`` (a candidate is kept when it is closer to the node than to every neighbour kept so far),
  topped up with the nearest pruned candidates to ``m``;
* the reverse edges are added; a node left with more than ``m_max`` neighbours (``2 m`` at
  level 0, ``m`` above, as Lance) is pruned again with the heuristic and topped up to ``m_max``.

Distances are the storage's own (``Space``, built by ``vector_space``): on dequantised SQ codes,
PQ reconstructions or the raw vectors; L2 is squared, cosine ``1 - cos``, dot ``1 - x.y``, as
Lance's.
Cost per partition: sum over levels of ``n_l^2 d`` for the candidates (quadratic in the
partition size: 10x the rows is 100x the time) plus ``n_l ef m d`` for the heuristic (each
candidate against the neighbours kept so far), memory ~4-8 ``BLOCK_CELLS`` floats beyond the
vectors; a 10k-vector partition (8, 16 or 32 dims, m 20, ef_construction 150) takes ~1.5-2 s
of CPU.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from lance_spark_ops.kernels import load

# distance cells computed at once per block (float32: 4 MiB x 4 = 16 MiB)
BLOCK_CELLS = 1 << 22
SEED = 0x484E5357  # "HNSW"


@dataclass(frozen=True)
class Params:
    """Lance's ``HnswBuildParams`` (the JSON of its partition metadata)."""

    max_level: int = 7
    m: int = 20
    ef_construction: int = 150
    prefetch_distance: int | None = 2

    def to_json(self) -> dict:
        return {"max_level": self.max_level, "m": self.m, "ef_construction": self.ef_construction,
                "prefetch_distance": self.prefetch_distance}

    @classmethod
    def from_json(cls, obj: dict) -> Params:
        return cls(int(obj.get("max_level", 7)), int(obj.get("m", 20)), int(obj.get("ef_construction", 150)),
                   obj.get("prefetch_distance", 2))


class Space:
    """Vectors and Lance's distance between two of them (``metric``: l2, cosine or dot)."""

    def __init__(self, vectors: np.ndarray, metric: str) -> None:
        if metric not in ("l2", "cosine", "dot"):
            raise ValueError(f"distance type {metric!r} is not supported for HNSW")
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if metric == "cosine":
            norms = np.linalg.norm(x, axis=1, keepdims=True)
            x = x / np.where(norms == 0, 1, norms)
        self.x, self.metric = x, metric
        self.sq = np.einsum("ij,ij->i", x, x) if metric == "l2" else None

    def __len__(self) -> int:
        return self.x.shape[0]

    def subset(self, ids: np.ndarray) -> Space:
        """The vectors ``ids`` (already normalised), as their own space."""
        out = object.__new__(Space)
        out.x, out.metric = self.x[ids], self.metric
        out.sq = self.sq[ids] if self.sq is not None else None
        return out

    def _finish(self, dot: np.ndarray, sq_a: np.ndarray | None, sq_b: np.ndarray | None) -> np.ndarray:
        d = dot  # in place: these blocks are the bulk of the memory traffic
        if self.metric == "l2":
            d *= -2
            d += sq_a
            d += sq_b
            np.maximum(d, 0, out=d)
        else:
            np.subtract(1, d, out=d)
        return d

    def block(self, rows: np.ndarray | slice) -> np.ndarray:
        """Distances from ``rows`` to every vector (len(rows), len(self))."""
        sq = self.sq
        return self._finish(self.x[rows] @ self.x.T, sq[rows][:, None] if sq is not None else None,
                            sq[None, :] if sq is not None else None)


@dataclass
class Level:
    """One level's adjacency lists, flat: node i's neighbours (ascending distance) are
    ``neighbors[offsets[i]:offsets[i + 1]]``."""

    nodes: np.ndarray  # uint32, ascending: the level's node ids
    offsets: np.ndarray  # int64, len(nodes) + 1
    neighbors: np.ndarray  # uint32
    distances: np.ndarray  # float32


@dataclass
class Graph:
    levels: list[Level]  # level 0 first; levels above the top one are absent
    entry_point: int
    params: Params

    def level_offsets(self) -> list[int]:
        sizes = [lv.nodes.size for lv in self.levels]
        sizes += [0] * (self.params.max_level - len(sizes))
        return [0, *np.cumsum(sizes).tolist()]

    def metadata(self) -> str:
        """The partition's ``lance:hnsw`` JSON (serde's field order, no spaces); "" when empty."""
        if not self.levels:
            return ""
        return json.dumps({"entry_point": self.entry_point, "params": self.params.to_json(),
                           "level_offsets": self.level_offsets()}, separators=(",", ":"))


def node_levels(n: int, params: Params, partition: int) -> np.ndarray:
    """Each node's top level (HNSW's exponential distribution), deterministic per partition."""
    rng = np.random.default_rng([SEED, partition])
    u = 1.0 - rng.random(n)  # (0, 1]
    ml = 1.0 / math.log(params.m) if params.m > 1 else 1.0
    return np.minimum(np.floor(-np.log(u) * ml), params.max_level - 1).astype(np.int64)


def build(space: Space, params: Params, partition: int) -> Graph:
    """The HNSW graph of all of ``space``'s vectors."""
    n = len(space)
    if n == 0:
        return Graph([], 0, params)
    levels = node_levels(n, params, partition)
    top = int(levels.max())
    entry = int(np.flatnonzero(levels == top)[0])
    out = []
    for lv in range(top + 1):
        nodes = np.flatnonzero(levels >= lv)
        m_max = params.m * 2 if lv == 0 else params.m
        out.append(_level(space, nodes, params.m, m_max, params.ef_construction))
    return Graph(out, entry, params)


def _rows_per_block(cells_per_row: int) -> int:
    return max(1, BLOCK_CELLS // max(cells_per_row, 1))


def _level(space: Space, nodes: np.ndarray, m: int, m_max: int, ef: int) -> Level:
    """The level holding ``nodes``; ids below are positions in ``nodes`` until the end."""
    n = nodes.size
    if n == 1:
        return Level(nodes.astype(np.uint32), np.zeros(2, np.int64), np.zeros(0, np.uint32),
                     np.zeros(0, np.float32))
    c = max(1, min(ef, n - 1))
    space = space.subset(nodes)
    # candidates: the c exact nearest of each node at this level (positions into ``nodes``)
    cand = np.empty((n, c), np.int64)
    cand_d = np.empty((n, c), np.float32)
    step = _rows_per_block(n)
    for s in range(0, n, step):
        rows = np.arange(s, min(s + step, n))
        d = space.block(slice(s, s + rows.size))
        d[np.arange(rows.size), rows] = np.inf  # not its own neighbour
        part = np.argpartition(d, c - 1, axis=1)[:, :c] if c < n else np.argsort(d, axis=1)[:, :c]
        pd = np.take_along_axis(d, part, axis=1)
        order = np.lexsort((part, pd), axis=1)  # by distance, then id (ties deterministic)
        cand[rows] = np.take_along_axis(part, order, axis=1)
        cand_d[rows] = np.take_along_axis(pd, order, axis=1)
    fwd = _select_blocks(space, cand, cand_d, m, m)
    # forward edges plus their reverses, deduplicated, sorted by (node, distance, neighbour)
    src = np.repeat(np.arange(n), c)[fwd.ravel()]
    dst = cand.ravel()[fwd.ravel()]
    dd = cand_d.ravel()[fwd.ravel()]
    src, dst, dd = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([dd, dd])
    _, first = np.unique(src * n + dst, return_index=True)
    src, dst, dd = src[first], dst[first], dd[first]
    order = np.lexsort((dst, dd, src))
    src, dst, dd = src[order], dst[order], dd[order]
    counts = np.bincount(src, minlength=n)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(src.size) - starts[src]
    keep = np.ones(src.size, bool)
    over = np.flatnonzero(counts > m_max)
    if over.size:
        # re-prune the crowded nodes over their nearest 2 m_max neighbours
        k = 2 * m_max
        sub = np.isin(src, over) & (rank < k)
        row_of = np.full(n, -1, np.int64)
        row_of[over] = np.arange(over.size)
        ids = np.full((over.size, k), -1, np.int64)
        dist = np.full((over.size, k), np.inf, np.float32)
        ids[row_of[src[sub]], rank[sub]] = dst[sub]
        dist[row_of[src[sub]], rank[sub]] = dd[sub]
        chosen = _select_blocks(space, ids, dist, m_max, m_max)
        in_over = np.isin(src, over)
        keep[in_over] = False
        keep[np.flatnonzero(sub)[chosen[row_of[src[sub]], rank[sub]]]] = True
    src, dst, dd = src[keep], dst[keep], dd[keep]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    gid = nodes.astype(np.uint32)
    return Level(gid, offsets, gid[dst], dd.astype(np.float32))


def _select_blocks(space: Space, ids: np.ndarray, dist: np.ndarray, k_max: int, k_fill: int) -> np.ndarray:
    k = ids.shape[1]
    out = np.zeros(ids.shape, bool)
    kernels = compiled_kernels()
    if kernels is not None:
        sq = space.sq if space.sq is not None else np.zeros(0, np.float32)
        kernels.select(space.x, sq, space.sq is not None, np.ascontiguousarray(ids, np.int64),
                       np.ascontiguousarray(dist, np.float32), k_max, k_fill, out)
        return out
    step = _rows_per_block(k_max * space.x.shape[1] + k)  # the kept vectors per row
    for s in range(0, ids.shape[0], step):
        sl = slice(s, s + step)
        out[sl] = select_neighbors(space, ids[sl], dist[sl], k_max, k_fill)
    return out


def select_neighbors(space: Space, ids: np.ndarray, dist: np.ndarray, k_max: int, k_fill: int) -> np.ndarray:
    """Lance's ``select_neighbors_heuristic`` for every row at once: ``ids`` (B, K) vectors of
    ``space`` (-1: none) sorted by ``dist`` ascending; a candidate is kept while fewer than
    ``k_max`` are and it is closer to the node than to each kept one. Then the nearest pruned
    candidates are added until ``k_fill`` are kept. Returns the kept mask (B, K)."""
    valid = ids >= 0
    b = ids.shape[0]
    sel = np.zeros(ids.shape, bool)
    count = np.zeros(b, np.int64)
    # the kept neighbours' vectors (and squared norms), filled left to right per row: each
    # candidate is compared with the kept ones only (B x k_max x d per step, no K x K block)
    kept = np.zeros((b, k_max, space.x.shape[1]), np.float32)
    kept_sq = np.zeros((b, k_max), np.float32)
    open_rows = np.arange(b)
    for j in range(ids.shape[1]):
        rows = open_rows[valid[open_rows, j]]
        if rows.size == 0:
            if open_rows.size == 0 or not valid[open_rows, j:].any():
                break
            continue
        c = count[rows]
        width = int(c.max())
        v = space.x[ids[rows, j]]
        ok = np.ones(rows.size, bool)
        if width:
            dots = np.einsum("rkd,rd->rk", kept[rows, :width], v)
            if space.sq is not None:
                vsq = space.sq[ids[rows, j]]
                d = space._finish(dots, vsq[:, None], kept_sq[rows, :width])
            else:
                d = space._finish(dots, None, None)
            ok = ~np.any((np.arange(width)[None, :] < c[:, None]) & (d <= dist[rows, j][:, None]), axis=1)
        acc = rows[ok]
        sel[acc, j] = True
        kept[acc, count[acc]] = v[ok]
        if space.sq is not None:
            kept_sq[acc, count[acc]] = space.sq[ids[acc, j]]
        count[acc] += 1
        open_rows = open_rows[count[open_rows] < k_max]
    if k_fill:
        unsel = valid & ~sel
        sel |= unsel & (np.cumsum(unsel, axis=1) <= (k_fill - count)[:, None])
    return sel


_loaded: list[ModuleType | None] = []


def compiled_kernels() -> ModuleType | None:
    """``hnsw_kernels`` (compiled, or loaded from numba's cache, once per process), or None
    without numba, with ``LSO_NO_COMPILED=1`` or when it fails (the numpy code then runs)."""
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def _warm(k: ModuleType) -> None:
    k.select(np.zeros((1, 1), np.float32), np.zeros(1, np.float32), True, np.zeros((1, 1), np.int64),
             np.zeros((1, 1), np.float32), 1, 1, np.zeros((1, 1), bool))


def _load() -> ModuleType | None:
    return load("lance_spark_ops.index.vector.hnsw_kernels", _warm, "HNSW")
