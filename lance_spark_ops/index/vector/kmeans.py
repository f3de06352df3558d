"""K-means for IVF centroids and PQ codebooks, split so its rounds can run as executor tasks
(no I/O).

Lance 14's k-means (``lance-index/src/vector/kmeans.rs``): centroids start as k distinct
sample vectors drawn at random; each round assigns every vector to its nearest centroid
(``assign``: squared L2, or ``1 - x.c`` for dot; cosine is L2 on normalised vectors, done by
the caller), the new centroids are the members' means, and an empty cluster takes half of a
big one (``split_empty``: the big cluster picked with probability ~ its size, both centroids
nudged by +-1/1024 in alternate dimensions). Training stops after ``max_iters`` rounds or when
the loss (sum of distances) moves by less than ``TOLERANCE`` of itself. Here a round is
``partial_sums`` over shares of the sample (one per task) summed by the driver
(``next_centroids``): only k x d sums and k counts travel.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from lance_spark_ops.concurrency import map_concurrently
from lance_spark_ops.kernels import load

TOLERANCE = 1e-4
BALANCE_FACTOR = 1.0  # of IVF training (Lance: with_balance_factor(1.0))
BLOCK_CELLS = 1 << 22  # distances computed at once per block (float32: 16 MiB)
PARALLEL_BLOCKS = 8  # an assignment's rows cut into at least this many blocks ...
MIN_BLOCK_ROWS = 1024  # ... of at least this many rows
TIE_TOLERANCE = 1e-4  # relative gap under which float32 may misorder two centroids
METRICS = ("l2", "dot")  # what assign computes; cosine is l2 on normalised vectors
# the exact assignment (best two scores) of narrow l2 rows (PQ sub-vectors) goes to the
# compiled kernel: one pass instead of GEMM + argmin + partition over an n x k block
# (pq_encode of 100k x 128, 16 x 256 centroids: 4.7 s -> 1.9 s); training rounds (best only)
# measured no faster there, and wider rows are faster with the GEMM
KERNEL_MAX_DIM = 16


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero), as Lance's ``normalize_fsl``."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64)).astype(x.dtype)
    return x / np.where(norms == 0, 1, norms)[:, None]


def finite_rows(x: np.ndarray) -> np.ndarray:
    """Rows without NaN or infinity (Lance's ``KeepFiniteVectors`` drops the others)."""
    if not x.size:
        return np.ones(x.shape[0], dtype=bool)
    # a row's sum is finite when all its values are (the usual case, one pass without a mask the
    # size of x); rows whose sum is not (a NaN or infinity, or an overflow) are looked at value by value
    keep = np.isfinite(x.sum(axis=1, dtype=np.float32 if x.dtype.itemsize <= 4 else x.dtype))
    bad = np.flatnonzero(~keep)
    if bad.size:
        keep[bad] = np.isfinite(x[bad]).all(axis=1)
    return keep


def assign(
    x: np.ndarray, centroids: np.ndarray, metric: str, exact: bool = True, bias: np.ndarray | None = None,
    kernel_max_dim: int = KERNEL_MAX_DIM,
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of each row (ties: the lowest id, as Lance's ``argmin``) and the
    distance to it. ``exact``: rows whose best two centroids are closer than float32 can tell
    (``TIE_TOLERANCE``) are decided again in float64, so rounding does not pick another
    centroid than the exact distances do (the codes of a build with given centroids or
    codebooks equal pylance's); training rounds stay in float32. ``bias`` (per centroid) is
    added to the distances when choosing, not to the distance returned (balanced k-means).
    ``kernel_max_dim``: the widest rows whose exact assignment goes to the compiled kernel."""
    if metric not in METRICS:
        raise ValueError(f"k-means distance {metric!r} is not supported")
    if not exact or bias is not None or centroids.shape[0] < 2:
        return _assign(x, centroids, metric, np.float64 if exact else np.float32, bias)[:2]
    ids, dist, doubt = _assign(x, centroids, metric, np.float32, None, TIE_TOLERANCE, kernel_max_dim)
    rows = np.flatnonzero(doubt)
    if rows.size:
        ids[rows], dist[rows] = _assign(x[rows], centroids, metric, np.float64, None)[:2]
    return ids, dist


def _assign(
    x: np.ndarray,
    centroids: np.ndarray,
    metric: str,
    dtype: type,
    bias: np.ndarray | None,
    tolerance: float = 0.0,
    kernel_max_dim: int = KERNEL_MAX_DIM,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``assign`` in ``dtype``; with ``tolerance``, also which rows' best two scores are within
    ``tolerance`` x (|x|^2 + max |c|^2) of each other."""
    n, k = x.shape[0], centroids.shape[0]
    ids = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.float64)
    doubt = np.zeros(n, dtype=bool) if tolerance else None
    c = centroids.astype(dtype)
    c_sq = np.einsum("ij,ij->i", c, c)
    c_max = float(c_sq.max()) if k else 0.0
    narrow = metric == "l2" and dtype is np.float32 and bias is None and 0 < c.shape[1] <= kernel_max_dim
    kernels = compiled_kernels() if tolerance and narrow and k else None
    if kernels is not None:
        xs = np.ascontiguousarray(x, dtype=np.float32)
        best = np.empty(n, np.float32)
        second = np.empty(n, np.float32)
        kernels.nearest2(xs, np.ascontiguousarray(c.T), c_sq.astype(np.float32), ids, best, second)
        x_sq = np.einsum("ij,ij->i", xs, xs)
        np.maximum(best.astype(np.float64) + x_sq, 0, out=dist)
        doubt[:] = (second - best) <= tolerance * (x_sq + c_max)
        return ids, dist, doubt
    dim = c.shape[1]
    # l2: |c|^2 - 2 x.c in one product, x with a column of ones against (-2c, |c|^2)
    # (|x|^2 is the same for every centroid: added to the winner only)
    # dot: -x.c (the argmin of 1 - x.c)
    cat = np.concatenate([-2 * c, c_sq[:, None]], axis=1).T.copy() if metric == "l2" else -c.T
    # blocks cut by the rows alone, never by the thread count: a GEMM's rounding can depend on
    # its shape (OpenBLAS's kernels for a block's last rows), so the same blocks give the same
    # result on any number of threads; at least PARALLEL_BLOCKS of them while a block keeps
    # MIN_BLOCK_ROWS, for threads to share (GEMMs release the GIL)
    step = max(1, min(BLOCK_CELLS // max(k, 1), max(MIN_BLOCK_ROWS, -(-n // PARALLEL_BLOCKS))))

    def block(lo: int) -> None:
        xb = x[lo : lo + step].astype(dtype, copy=False)
        x_sq = np.einsum("ij,ij->i", xb, xb)
        rows = np.arange(xb.shape[0])
        if metric == "l2":
            xa = np.empty((xb.shape[0], dim + 1), dtype=dtype)
            xa[:, :dim] = xb
            xa[:, dim] = 1
            d = xa @ cat
            score = d if bias is None else d + bias
            best = np.argmin(score, axis=1)
            dist[lo : lo + step] = np.maximum(d[rows, best].astype(np.float64) + x_sq, 0)
        else:
            d = xb @ cat
            score = d if bias is None else d + bias
            best = np.argmin(score, axis=1)
            dist[lo : lo + step] = 1 + d[rows, best].astype(np.float64)
        ids[lo : lo + step] = best
        if doubt is not None:  # the second lowest score: the lowest with the winner's masked
            first = score[rows, best]
            score[rows, best] = np.inf
            second = score.min(axis=1)
            doubt[lo : lo + step] = (second - first) <= tolerance * (x_sq + c_max)

    map_concurrently(block, range(0, n, step), threads)
    return ids, dist, doubt


@dataclass
class Partial:
    """One share of a round: per-centroid sums of its rows (k x d, float64), member counts,
    distance sums and largest distances."""

    sums: np.ndarray
    counts: np.ndarray
    losses: np.ndarray
    radius: np.ndarray

    @classmethod
    def total(cls, parts: list[Partial]) -> Partial:
        return cls(
            np.sum([p.sums for p in parts], axis=0),
            np.sum([p.counts for p in parts], axis=0),
            np.sum([p.losses for p in parts], axis=0),
            np.max([p.radius for p in parts], axis=0),
        )


def partial_sums(
    x: np.ndarray, centroids: np.ndarray, metric: str, bias: np.ndarray | None = None, threads: int = 1,
    xt: np.ndarray | None = None,
) -> Partial:
    """One round's share over rows ``x``: assignments in float32 (``threads``: their blocks on
    that many threads), per-centroid sums in float64 in row order. ``xt``: ``x`` transposed as
    float64 (d x n, contiguous) when the caller holds it (``fit``: once for all its rounds)."""
    k, d = centroids.shape
    if metric not in METRICS:
        raise ValueError(f"k-means distance {metric!r} is not supported")
    ids, dist = _assign(x, centroids, metric, np.float32, bias, threads=threads)[:2]
    sums = np.zeros((k, d), dtype=np.float64)
    for j in range(d):  # a bincount per column: faster than np.add.at
        w = xt[j] if xt is not None else x[:, j].astype(np.float64)
        sums[:, j] = np.bincount(ids, weights=w, minlength=k)
    radius = np.zeros(k, dtype=np.float64)
    np.maximum.at(radius, ids, dist)
    return Partial(
        sums,
        np.bincount(ids, minlength=k).astype(np.int64),
        np.bincount(ids, weights=dist, minlength=k),
        radius,
    )


def split_empty(centroids: np.ndarray, counts: np.ndarray, n: int, rng: np.random.Generator) -> None:
    """Lance's ``split_clusters``, in place: each empty cluster takes half of a cluster chosen
    with probability (size - 1) / (n - k), both nudged apart by 1/1024."""
    k, d = centroids.shape
    if n <= k:
        return
    eps = 1.0 / 1024.0
    sign = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    for i in np.flatnonzero(counts == 0).tolist():
        j = 0
        for _ in range(100 * k):
            if rng.random() < (counts[j] - 1.0) / (n - k):
                break
            j = (j + 1) % k
        else:
            j = int(np.argmax(counts))
        counts[i] = counts[j] // 2
        counts[j] -= counts[i]
        base = centroids[j].copy()
        centroids[i] = base * (1 + eps * sign)
        centroids[j] = base * (1 - eps * sign)


class Training:
    """The driver's side of k-means: the centroids, the previous round's cluster sizes and
    the balance factor. Lance's IVF training is balanced (``balance_factor`` 1): a row picks
    the centroid minimising distance + f x the centroid's size in the previous round, f =
    min(balance_factor, (radius - mean distance) of the largest cluster / n); the loss adds
    f x (sum of sizes^2 - n^2 / k). PQ training is not balanced (0)."""

    def __init__(self, centroids: np.ndarray, balance_factor: float, seed: int) -> None:
        self.centroids = centroids
        self.balance = balance_factor
        self.rng = np.random.default_rng(seed)
        self.sizes = np.zeros(centroids.shape[0], dtype=np.int64)
        self.adjusted = float("inf")
        self.loss: float | None = None

    def bias(self) -> np.ndarray | None:
        f = min(self.adjusted, self.balance)
        return (f * self.sizes).astype(np.float64) if f > 0 and self.sizes.any() else None

    def update(self, p: Partial) -> bool:
        """Take a round's summed shares; True when the loss has converged."""
        f = min(self.adjusted, self.balance)
        n = int(p.counts.sum())
        k = self.centroids.shape[0]
        big = int(np.argmax(p.counts))
        if n and p.counts[big]:
            self.adjusted = float((p.radius[big] - p.losses[big] / p.counts[big]) / n)
        loss = float(p.losses.sum()) + (
            f * (float((p.counts.astype(np.float64) ** 2).sum()) - n * n / k) if f > 0 else 0.0
        )
        counts = p.counts.copy()
        out = np.where(counts[:, None] > 0, p.sums / np.maximum(counts, 1)[:, None], 0.0)
        split_empty(out, counts, n, self.rng)
        self.centroids, self.sizes = out.astype(self.centroids.dtype), counts
        done = self.loss is not None and abs(self.loss - loss) < TOLERANCE * loss
        self.loss = loss
        return done


_loaded: list[ModuleType | None] = []


def compiled_kernels() -> ModuleType | None:
    """``kmeans_kernels`` (compiled, or loaded from numba's cache, once per process), or None
    without numba, with ``LSO_NO_COMPILED=1`` or when it fails (the GEMM code then runs)."""
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def _warm(k: ModuleType) -> None:
    one = np.zeros(1, np.float32)
    k.nearest2(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), one, np.zeros(1, np.int64),
               one.copy(), one.copy())


def _load() -> ModuleType | None:
    return load("lance_spark_ops.index.vector.kmeans_kernels", _warm, "k-means")


def init_centroids(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct rows of ``x`` drawn at random."""
    return x[np.sort(rng.choice(x.shape[0], size=k, replace=False))].copy()


def train(
    x: np.ndarray, k: int, metric: str, max_iters: int, seed: int, balance_factor: float = 0.0
) -> tuple[np.ndarray, float]:
    """The whole training in one process (PQ sub-vectors): centroids and the last loss. Same
    rounds as the distributed form."""
    if x.shape[0] > k * 512:  # Lance caps the training rows at k * 512
        x = x[: k * 512]
    return fit(x, init_centroids(x, k, np.random.default_rng(seed)), metric, max_iters, seed, balance_factor)


def fit(
    x: np.ndarray, init: np.ndarray, metric: str, max_iters: int, seed: int, balance_factor: float,
    threads: int = 1,
) -> tuple[np.ndarray, float]:
    """Rounds from ``init`` until converged or ``max_iters``: centroids and the last loss
    (``threads``: each round's assignment on that many threads; the same result)."""
    t = Training(init, balance_factor, seed)
    xt = np.ascontiguousarray(x.T, dtype=np.float64)  # the sums' weights, converted once
    for _ in range(max_iters):
        if t.update(partial_sums(x, t.centroids, metric, t.bias(), threads, xt)):
            break
    return t.centroids, float(t.loss or 0.0)
