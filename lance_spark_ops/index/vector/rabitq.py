"""RaBitQ (IVF_RQ's quantizer) as pylance 14 trains and applies it (no I/O).

The model (``rabitq_model`` of pylance's distributed API, the ``storage_metadata`` of
``auxiliary.idx``) is a rotation and a bit width: ``fast`` (default) = 4 rounds of random sign
flips (one bit per dimension and round, set = flip), a fast Walsh-Hadamard transform and a
``1/sqrt(2^floor(log2 d))`` rescale (dimensions that are not a power of two: the transform
alternates over the head and the tail, each round then mixes the halves, and the result is
scaled by 1/4); ``matrix`` = a dense orthogonal ``d x d`` matrix P, the rotation being
``P[:, :d] @ v``.

A vector's residual against its IVF centroid is rotated; its 1-bit code is the sign of each
rotated value (bit i of byte i/8, LSB first). With ``num_bits`` = 1 + ex_bits > 1 each
dimension also gets an ``ex_bits`` code: the rescale factor t maximising the cosine between
the rotated residual and its quantised version is searched over every threshold
``code / |v_d|`` (Lance's event scan, in float32 and in its order), then
``floor(t |v_d| / ||v|| + 1e-5)`` (bit-inverted for negative values), packed in Lance's
64-dimension blocked layout. Per row factors (add, scale, error and, with ex codes, ex add / ex
scale) let a query estimate its distance; they depend on the rotated centroid too.

Every float32 sum Lance runs sequentially over the dimensions is run the same way here (one
vector operation per dimension over all rows; ``rabitq_kernels`` row by row), so the codes
equal pylance's bit for bit. How they are stored: ``rabitq_storage``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.kernels import load

ROUNDS = 4
EPS = np.float32(1.0e-5)
TIGHT_START = np.array([0.0, 0.15, 0.20, 0.52, 0.59, 0.71, 0.75, 0.77, 0.81], dtype=np.float32)
ERROR_EPSILON = np.float32(1.9)
BLOCK_DIMS = 64
_CHUNK = 1024  # rows per step of the rescale search (events: rows x dims x 2^ex_bits)


@dataclass(frozen=True)
class RabitModel:
    """A RaBitQ rotation: ``signs`` (fast: 4 x ceil(d/8) bytes) or ``matrix`` (d x d float32)."""

    dim: int
    num_bits: int = 5
    rotation: str = "fast"
    signs: np.ndarray | None = field(default=None, compare=False)
    matrix: np.ndarray | None = field(default=None, compare=False)

    @property
    def ex_bits(self) -> int:
        return self.num_bits - 1

    @property
    def code_bytes(self) -> int:
        return (self.dim + 7) // 8

    @property
    def ex_code_bytes(self) -> int:
        padded = -(-self.dim // BLOCK_DIMS) * BLOCK_DIMS
        return padded * self.ex_bits // 8 if self.ex_bits else 0

    def same(self, other: RabitModel) -> bool:
        """Whether both rotate and code vectors the same way."""
        if (self.dim, self.num_bits, self.rotation) != (other.dim, other.num_bits, other.rotation):
            return False
        if self.rotation == "fast":
            return bool(np.array_equal(self.signs, other.signs))
        return bool(np.array_equal(self.matrix, other.matrix))

    def metadata(self, packed: bool = True) -> dict:
        """The JSON object pylance stores (``rabitq_model``; ``storage_metadata`` with packed)."""
        return {
            "rotate_mat_position": 2 if self.rotation == "matrix" else None,
            "fast_rotation_signs": None if self.signs is None else [int(b) for b in self.signs],
            "rotation_type": self.rotation,
            "code_dim": self.dim,
            "num_bits": self.num_bits,
            "packed": packed,
            "query_estimator": "raw_query",
        }

    def to_json(self, packed: bool = False) -> str:
        return json.dumps(self.metadata(packed), separators=(",", ":"))


def validate(dim: int, num_bits: int) -> None:
    if not 1 <= int(num_bits) <= 9:
        raise InvalidInputError(f"IVF_RQ num_bits must be in 1..=9, got {num_bits}")
    if dim % 8:
        raise InvalidInputError(f"IVF_RQ needs a vector dimension divisible by 8, got {dim}")


def new_model(dim: int, num_bits: int = 5, seed: int | None = None) -> RabitModel:
    """A fresh fast rotation (random signs), as ``build_rq_model``."""
    validate(dim, num_bits)
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 256, size=ROUNDS * ((dim + 7) // 8), dtype=np.uint8)
    return RabitModel(dim, int(num_bits), "fast", signs=signs)


def from_metadata(meta: dict | str, matrix: np.ndarray | None = None, layout_only: bool = False
                  ) -> RabitModel:
    """The model of a ``rabitq_model`` / ``storage_metadata`` object (matrix rotation: the
    matrix from the file's global buffer; ``layout_only``: the widths only, no rotation needed,
    for rewriting stored rows)."""
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError as e:
            raise InvalidInputError(f"rabitq_model is not JSON ({e})") from e
    if not isinstance(meta, dict):
        raise InvalidInputError("rabitq_model must be a JSON object")
    try:
        num_bits = int(meta["num_bits"])
        rotation = str(meta.get("rotation_type", "matrix"))
        dim = int(meta.get("code_dim") or 0)
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidInputError(f"rabitq_model lacks num_bits / code_dim ({e})") from e
    if rotation == "fast":
        signs = np.asarray(meta.get("fast_rotation_signs") or [], dtype=np.int64)
        if signs.size != ROUNDS * ((dim + 7) // 8) or signs.min(initial=0) < 0 or signs.max(initial=0) > 255:
            raise InvalidInputError(
                f"rabitq_model fast_rotation_signs: {signs.size} bytes for dimension {dim}, "
                f"expected {ROUNDS * ((dim + 7) // 8)}"
            )
        validate(dim, num_bits)
        return RabitModel(dim, num_bits, "fast", signs=signs.astype(np.uint8))
    if rotation != "matrix":
        raise InvalidInputError(f"rabitq_model rotation_type {rotation!r} is not fast or matrix")
    if layout_only and dim:
        validate(dim, num_bits)
        return RabitModel(dim, num_bits, "matrix")
    if matrix is None:
        raise InvalidInputError("rabitq_model: a matrix rotation needs its rotate_mat")
    matrix = np.asarray(matrix, dtype=np.float32)
    dim = dim or matrix.shape[0]
    if matrix.shape != (dim, dim):
        raise InvalidInputError(f"rabitq_model rotate_mat of shape {matrix.shape}, dimension {dim}")
    validate(dim, num_bits)
    return RabitModel(dim, num_bits, "matrix", matrix=matrix)


# --- rotation -------------------------------------------------------------------------------


def _fwht(x: np.ndarray) -> np.ndarray:
    """In-place-order butterflies over the last axis (a power of two), float32 as Lance."""
    n, d = x.shape
    half = 1
    while half < d:
        v = x.reshape(n, d // (2 * half), 2, half)
        a, b = v[:, :, 0, :], v[:, :, 1, :]
        x = np.stack([a + b, a - b], axis=2).reshape(n, d)
        half *= 2
    return x


def _sign_masks(signs: np.ndarray, dim: int) -> np.ndarray:
    """ROUNDS x dim float32 of +-1 (bit set = flip)."""
    per = (dim + 7) // 8
    bits = np.unpackbits(signs.reshape(ROUNDS, per), axis=1, bitorder="little")[:, :dim]
    return np.where(bits == 1, np.float32(-1.0), np.float32(1.0)).astype(np.float32)


def rotate(model: RabitModel, x: np.ndarray) -> np.ndarray:
    """The rotated rows of ``x`` (n x dim float32)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, model.dim)
    if model.rotation == "matrix":
        return (x @ model.matrix[:, : model.dim].T).astype(np.float32)
    d = model.dim
    if d == 0 or x.shape[0] == 0:
        return x.copy()
    masks = _sign_masks(model.signs, d)
    trunc = 1 << (d.bit_length() - 1)
    scale = np.float32(1.0) / np.sqrt(np.float32(trunc))
    kernels = compiled_kernels()
    if kernels is not None:
        out = np.empty_like(x)
        kernels.rotate_fast(np.ascontiguousarray(x), masks, np.array([scale], np.float32),
                            np.array([trunc], np.int64), out)
        return out
    out = x.copy()
    if trunc == d:
        for r in range(ROUNDS):
            out = _fwht(out * masks[r]) * scale
        return out
    start, half = d - trunc, d // 2
    for r in range(ROUNDS):
        out = out * masks[r]
        if r % 2 == 0:
            out[:, :trunc] = _fwht(np.ascontiguousarray(out[:, :trunc])) * scale
        else:
            out[:, start:] = _fwht(np.ascontiguousarray(out[:, start:])) * scale
        left, right = out[:, :half].copy(), out[:, half : 2 * half].copy()
        out[:, :half] = left + right
        out[:, half : 2 * half] = left - right
    return out * np.float32(0.25)


# --- codes ----------------------------------------------------------------------------------


def _seq_sum(terms: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Row sums of an n x d float32 array added left to right (Lance's scalar loops)."""
    acc = np.zeros(terms.shape[0], dtype=np.float32) if start is None else start.astype(np.float32)
    for j in range(terms.shape[1]):
        acc = acc + terms[:, j]
    return acc


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows over their norm as Lance's ``normalize_fsl`` (squares summed in order, float32)."""
    x = np.asarray(x, dtype=np.float32)
    norm = np.sqrt(_seq_sum(x * x))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (x / norm[:, None]).astype(np.float32)


def l2_norm_square(diff: np.ndarray) -> np.ndarray:
    """Lance's float32 L2 (``l2_scalar`` with 16 lanes): the leftover dims summed first, each lane
    over the 16-dim chunks, then the leftover plus the lanes summed in order."""
    n, d = diff.shape
    sq = diff * diff
    full = d // 16 * 16
    rest = _seq_sum(sq[:, full:])
    lanes = np.zeros((n, 16), dtype=np.float32)
    for j in range(0, full, 16):
        lanes = lanes + sq[:, j : j + 16]
    return (rest + _seq_sum(lanes)).astype(np.float32)


def norm_square(residuals: np.ndarray, metric: str) -> np.ndarray:
    """|x - c|^2 as Lance has it for the factors: l2 / cosine the assignment's distance
    (``l2_norm_square``), dot the squares summed in order."""
    if metric == "dot":
        return _seq_sum(residuals * residuals)
    return l2_norm_square(residuals)


def binary_codes(rotated: np.ndarray) -> np.ndarray:
    """n x ceil(d/8) sign bits, LSB first."""
    return np.packbits(~np.signbit(rotated), axis=1, bitorder="little")


def _rescale_factors(a: np.ndarray, ex_bits: int) -> np.ndarray:
    """Lance's ``best_ex_rescale_factor`` of each row of ``a`` (|v| / ||v||, float32)."""
    n, d = a.shape
    max_code = (1 << ex_bits) - 1
    finite = np.isfinite(a)
    max_value = np.max(np.where(finite, a, np.float32(0.0)), axis=1, initial=np.float32(0.0))
    ok = max_value > 0
    safe_max = np.where(ok, max_value, np.float32(1.0))
    t_end = np.float32(max_code + 10) / safe_max
    t_start = t_end * TIGHT_START[ex_bits]
    usable = finite & (a > 0)
    cur = np.floor(t_start[:, None] * a + EPS)
    cur = np.where(usable, np.clip(cur, 0, max_code), 0).astype(np.int64)
    den = _seq_sum(np.where(usable, (cur * cur + cur).astype(np.float32), np.float32(0.0)),
                   np.full(n, np.float32(d) * np.float32(0.25), dtype=np.float32))
    num = _seq_sum(np.where(usable, (cur.astype(np.float32) + np.float32(0.5)) * a, np.float32(0.0)))
    # events: for each dim and each code above the current one, threshold = code / a
    nxt = np.arange(1, max_code + 1, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        thr = nxt.astype(np.float32)[None, None, :] / a[:, :, None]
    valid = usable[:, :, None] & (nxt[None, None, :] > cur[:, :, None]) & (thr < t_end[:, None, None])
    keys = thr.view(np.uint32).astype(np.uint64) << np.uint64(32)
    low = (np.arange(d, dtype=np.uint64)[:, None] << np.uint64(8)) | nxt.astype(np.uint64)[None, :]
    keys = np.where(valid, keys | low[None, :, :], np.uint64(np.iinfo(np.uint64).max)).reshape(n, -1)
    keys.sort(axis=1)
    live = keys != np.iinfo(np.uint64).max
    idx = ((keys >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.int64)
    code = (keys & np.uint64(0xFF)).astype(np.float32)
    idx = np.where(live, idx, 0)
    inc_num = np.where(live, np.take_along_axis(a, idx, axis=1), np.float32(0.0))
    inc_den = np.where(live, np.float32(2.0) * code, np.float32(0.0))
    nums = np.cumsum(np.concatenate([num[:, None], inc_num], axis=1), axis=1, dtype=np.float32)
    dens = np.cumsum(np.concatenate([den[:, None], inc_den], axis=1), axis=1, dtype=np.float32)
    ip = nums / np.sqrt(dens)
    ip[:, 1:][~live] = -np.inf
    best = np.argmax(ip, axis=1)
    thresholds = (keys >> np.uint64(32)).astype(np.uint32).view(np.float32)
    rows = np.arange(n)
    t = np.where(best > 0, thresholds[rows, np.maximum(best - 1, 0)], t_start)
    return np.where(ok, t, np.float32(0.0)).astype(np.float32)


def ex_code_values(rotated: np.ndarray, ex_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(n x d uint8 ex code per dimension, n float32 ``<v, code - bias>``) of rotated rows."""
    n, d = rotated.shape
    values = np.zeros((n, d), dtype=np.uint8)
    dots = np.zeros(n, dtype=np.float32)
    kernels = compiled_kernels()
    if kernels is not None:
        kernels.ex_codes(np.ascontiguousarray(rotated, dtype=np.float32), TIGHT_START[ex_bits : ex_bits + 1],
                         np.array([ex_bits], np.int64), values, dots)
        return values, dots
    norm_sq = _seq_sum(rotated * rotated)
    good = (norm_sq > np.finfo(np.float32).eps) & np.isfinite(norm_sq)
    if not good.any():
        return values, dots
    v = rotated[good]
    norm = np.sqrt(norm_sq[good])
    a = np.abs(v) / norm[:, None]
    t = np.concatenate([_rescale_factors(a[i : i + _CHUNK], ex_bits) for i in range(0, len(a), _CHUNK)])
    mask = (1 << ex_bits) - 1
    code = np.clip(np.floor(t[:, None] * a + EPS), 0, mask).astype(np.uint8)
    neg = np.signbit(v)
    code = np.where(neg, (~code) & mask, code).astype(np.uint8)
    full = ((~neg).astype(np.int64) << ex_bits) + code
    bias = -np.float32((1 << ex_bits) - 0.5)
    dots[good] = _seq_sum(v * (full.astype(np.float32) + bias))
    values[good] = code
    return values, dots


def _top_plane(block: np.ndarray, bit: int) -> np.ndarray:
    """n x 8 bytes: the top bit of dim 16k+b at bit 8(b%8) + 2k + b/8 of a little-endian u64."""
    k = np.repeat(np.arange(4), 16)
    b = np.tile(np.arange(16), 4)
    pos = 8 * (b % 8) + 2 * k + b // 8
    bits = ((block >> bit) & 1).astype(np.uint64) << pos.astype(np.uint64)
    return np.bitwise_or.reduce(bits, axis=1).astype("<u8").view(np.uint8).reshape(-1, 8)


def pack_blocked(values: np.ndarray, ex_bits: int) -> np.ndarray:
    """Lance's blocked layout of n x d ex codes (64-dim blocks, the last one zero-padded)."""
    n, d = values.shape
    blocks = -(-d // BLOCK_DIMS)
    v = np.zeros((n, blocks * BLOCK_DIMS), dtype=np.uint8)
    v[:, :d] = values
    out = []
    for blk in range(blocks):
        x = v[:, blk * 64 : (blk + 1) * 64]
        r = [x[:, 16 * k : 16 * k + 16] for k in range(4)]
        if ex_bits == 1:
            out.append(np.packbits(x & 1, axis=1, bitorder="little"))
        elif ex_bits in (2, 3):
            out.append((r[0] & 3) | ((r[1] & 3) << 2) | ((r[2] & 3) << 4) | ((r[3] & 3) << 6))
            if ex_bits == 3:
                out.append(_top_plane(x, 2))
        elif ex_bits == 4:
            for u in range(4):
                out.append((x[:, 16 * u : 16 * u + 8] & 15) | ((x[:, 16 * u + 8 : 16 * u + 16] & 15) << 4))
        elif ex_bits == 5:
            out.append((r[0] & 15) | ((r[1] & 15) << 4))
            out.append((r[2] & 15) | ((r[3] & 15) << 4))
            out.append(_top_plane(x, 4))
        elif ex_bits in (6, 7):
            for k in range(3):
                out.append((r[k] & 63) | (((r[3] >> (2 * k)) & 3) << 6))
            if ex_bits == 7:
                out.append(_top_plane(x, 6))
        else:
            out.append(x)
    return np.concatenate(out, axis=1).astype(np.uint8) if out else np.zeros((n, 0), np.uint8)


# --- rows -----------------------------------------------------------------------------------


@dataclass
class Encoded:
    """The storage columns of n rows (codes row-major; ``pack_partition`` lays a partition out)."""

    codes: np.ndarray
    add: np.ndarray
    scale: np.ndarray
    error: np.ndarray
    ex_codes: np.ndarray | None = None
    ex_add: np.ndarray | None = None
    ex_scale: np.ndarray | None = None


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den == 0, np.float32(0.0), num / den).astype(np.float32)


def encode_assigned(model: RabitModel, x: np.ndarray, centroids: np.ndarray, parts: np.ndarray,
                    metric: str) -> Encoded:
    """Codes and factors of vectors ``x`` placed in partitions ``parts`` of ``centroids``
    (their residuals; ``metric`` l2 - cosine after normalising - or dot). Compiled: one pass per
    row (``rabitq_kernels.encode_rows``); else ``encode`` on the residuals."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    kernels = compiled_kernels() if model.rotation == "fast" else None
    if kernels is None or x.shape[0] == 0:
        res = (x - centroids[parts]).astype(np.float32)
        return encode(model, res, rotate(model, centroids)[parts], norm_square(res, metric), metric)
    n, d = x.shape
    trunc = 1 << (d.bit_length() - 1)
    scale = np.float32(1.0) / np.sqrt(np.float32(trunc))
    codes = np.empty((n, model.code_bytes), np.uint8)
    values = np.zeros((n, d), np.uint8)
    f = np.empty((n, 5), np.float32)
    kernels.encode_rows(x, np.ascontiguousarray(parts, dtype=np.int64), centroids, rotate(model, centroids),
                        _sign_masks(model.signs, d),
                        np.array([scale, TIGHT_START[model.ex_bits]], np.float32),
                        np.array([trunc, model.ex_bits, metric == "dot"], np.int64), codes, values, f)
    out = Encoded(codes, f[:, 0].copy(), f[:, 1].copy(), f[:, 2].copy())
    if model.ex_bits:
        out.ex_codes = pack_blocked(values, model.ex_bits)
        out.ex_add, out.ex_scale = f[:, 3].copy(), f[:, 4].copy()
    return out


def encode(model: RabitModel, residuals: np.ndarray, rotated_centroids: np.ndarray,
           norm_square: np.ndarray, metric: str) -> Encoded:
    """Codes and factors of residuals (x - c, float32) in partitions whose rotated centroids
    are ``rotated_centroids`` (one row per residual). ``norm_square``: l2 the squared distance
    to the centroid, dot |x - c|^2. ``metric``: l2 (cosine after normalising) or dot."""
    r = rotate(model, residuals)
    c = np.asarray(rotated_centroids, dtype=np.float32)
    norm_square = np.asarray(norm_square, dtype=np.float32)
    codes = binary_codes(r)
    ex_bits = model.ex_bits
    kernels = compiled_kernels()
    if kernels is not None:
        n = r.shape[0]
        values, dots = (ex_code_values(r, ex_bits) if ex_bits else
                        (np.zeros((n, r.shape[1]), np.uint8), np.zeros(n, np.float32)))
        f = np.empty((n, 5), np.float32)
        f[:, 3] = dots
        kernels.factors(r, np.ascontiguousarray(c), np.ascontiguousarray(norm_square), values,
                        np.array([ex_bits, metric == "dot"], np.int64), f)
        out = Encoded(codes, f[:, 0].copy(), f[:, 1].copy(), f[:, 2].copy())
        if ex_bits:
            out.ex_codes = pack_blocked(values, ex_bits)
            out.ex_add, out.ex_scale = f[:, 3].copy(), f[:, 4].copy()
        return out
    half = np.where(np.signbit(r), np.float32(-0.5), np.float32(0.5))
    bin_res = _seq_sum(r * half)
    bin_cent = _seq_sum(c * half)
    if ex_bits:
        values, ex_res = ex_code_values(r, ex_bits)
        full = ((~np.signbit(r)).astype(np.int64) << ex_bits) + values
        ex_cent = _seq_sum(c * (full.astype(np.float32) - np.float32((1 << ex_bits) - 0.5)))
    d = r.shape[1]
    code_norm = np.float32(d) * np.float32(0.25)
    with np.errstate(divide="ignore", invalid="ignore"):
        align = norm_square * code_norm / (bin_res * bin_res)
        ang = np.sqrt(np.maximum(align - np.float32(1.0), np.float32(0.0)) / np.float32(d - 1))
    err = np.sqrt(norm_square) * ERROR_EPSILON * ang
    err = np.where((d <= 1) | (norm_square <= 0) | (bin_res == 0), np.float32(0.0), err)
    if metric == "dot":
        base = np.float32(1.0) - _seq_sum(r * c)
        out = Encoded(codes, base + _ratio(norm_square * bin_cent, bin_res), _ratio(-norm_square, bin_res),
                      err.astype(np.float32))
        if ex_bits:
            out.ex_add = base + _ratio(norm_square * ex_cent, ex_res)
            out.ex_scale = _ratio(-norm_square, ex_res)
    else:
        two = np.float32(2.0)
        out = Encoded(codes, norm_square + two * _ratio(norm_square * bin_cent, bin_res),
                      _ratio(-two * norm_square, bin_res), (two * err).astype(np.float32))
        if ex_bits:
            out.ex_add = norm_square + two * _ratio(norm_square * ex_cent, ex_res)
            out.ex_scale = _ratio(-two * norm_square, ex_res)
    if ex_bits:
        out.ex_codes = pack_blocked(values, ex_bits)
    return out


_loaded: list[ModuleType | None] = []


def compiled_kernels() -> ModuleType | None:
    """``rabitq_kernels`` (compiled, or loaded from numba's cache, once per process), or None
    without numba, with ``LSO_NO_COMPILED=1`` or when it fails (the numpy code then runs)."""
    if not _loaded:
        _loaded.append(load("lance_spark_ops.index.vector.rabitq_kernels", _warm, "RaBitQ"))
    return _loaded[0]


def _warm(k: ModuleType) -> None:
    x = np.ones((1, 8), np.float32)
    f1, i1 = np.ones(1, np.float32), np.array([8], np.int64)
    k.rotate_fast(x, np.ones((ROUNDS, 8), np.float32), f1, i1, x.copy())
    k.ex_codes(x, TIGHT_START[4:5], np.array([4], np.int64), np.zeros((1, 8), np.uint8),
               np.zeros(1, np.float32))
    k.factors(x, x, np.ones(1, np.float32), np.zeros((1, 8), np.uint8), np.array([4, 0], np.int64),
              np.zeros((1, 5), np.float32))
    k.encode_rows(x, np.zeros(1, np.int64), x, x, np.ones((ROUNDS, 8), np.float32),
                  np.array([1.0, TIGHT_START[4]], np.float32), np.array([8, 4, 0], np.int64),
                  np.zeros((1, 1), np.uint8), np.zeros((1, 8), np.uint8), np.zeros((1, 5), np.float32))
