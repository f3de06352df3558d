"""MINHASHLSH signatures and files as pylance 14.0.2 computes and writes them (no I/O).

A document's tokens (the FTS tokenizer of the index details: by default ``simple``, lower case,
ASCII folding, tokens of 40 bytes or more dropped, no stemming or stop words) form shingles of
``shingle_size`` consecutive tokens (all of them when fewer), their bytes joined by 0x1F. Each
shingle's XXH64 (seed 42) goes through ``num_hashes`` permutations ``a * x + b`` (wrapping
u64; a odd), the minimum per permutation is kept and compressed to 16 bits as
``(c * min) >> 48`` (c odd); a, b, c come from SplitMix64 seeded with 42 (a, b alternating,
then the c's). A document without tokens has no signature and is not indexed. The signature
splits into ``num_bands`` bands; a band key is the band id in the top 8 bits and the low 56
bits of the XXH64 (seed 42) of the band's values (u16 little-endian).

Files: ``signatures.lance`` - ``_rowid`` (uint64: row address, or stable row id) and
``signature`` (fixed_size_list<uint16>[num_hashes], full-zip, no compression), one row per
indexed document in scan order (the row number is the doc id); ``bands.lance`` - ``band_key``
(uint64) and ``doc_id`` (uint32), both uncompressed, sorted, with global buffer 1 the page
table (the last key of every 4096 rows, u64 LE). Both carry ``minhash_lsh_index_version``
("0") and ``minhash_lsh_details`` (hex of the details message) in their schema metadata;
``bands`` also ``minhash_lsh_num_docs``, ``minhash_lsh_page_rows`` and
``minhash_lsh_page_table_buffer`` ("1"). Index entry: ``index_version`` 0, details
``/lance.index.pb.MinHashLshIndexDetails`` (num_hashes 1, num_bands 2, shingle_size 3,
tokenizer 4 = ``InvertedIndexDetails``, signature_version 5 = 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from lance_spark_ops.index.fts.tokenizer import Analyzer, TokenizerParams
from lance_spark_ops.index.params import IndexParams
from lance_spark_ops.index.scalar.bloomfilter import xxh64
from lance_spark_ops.kernels import load
from lance_spark_ops.pb_wire import encode_varint

SIGNATURES = "signatures.lance"
BANDS = "bands.lance"
FILES = (SIGNATURES, BANDS)
TYPE_URL = "/lance.index.pb.MinHashLshIndexDetails"
INDEX_VERSION = 0
SEED = 42
SEPARATOR = 0x1F
PAGE_ROWS = 4096
SHINGLE_CHUNK = 1 << 15  # shingles permuted at a time (x num_hashes u64 each)



@dataclass(frozen=True, eq=False)
class MinHashTokenizer(IndexParams):
    """The tokenizer keys pylance's MinHash takes (InvertedIndexParams), with its dedup defaults."""

    base_tokenizer: str = "simple"
    language: str = "English"
    max_token_length: int | None = 40
    lower_case: bool = True
    stem: bool = False
    remove_stop_words: bool = False
    ascii_folding: bool = True


@dataclass(frozen=True, eq=False)
class MinHashParams(IndexParams):
    """A MINHASHLSH build's checked parameters (pylance's names)."""

    num_hashes: int = 128
    num_bands: int = 16
    shingle_size: int = 3
    tokenizer: MinHashTokenizer = field(default_factory=MinHashTokenizer)


DEFAULTS: dict[str, Any] = {k: v for k, v in MinHashParams().items() if k != "tokenizer"}
TOKENIZER_DEFAULTS: dict[str, Any] = MinHashTokenizer().as_dict()
_MASK = (1 << 64) - 1


def check_params(params: Mapping[str, Any]) -> MinHashParams:
    """pylance's parameters (num_hashes, num_bands, shingle_size, tokenizer) parsed once, with
    its defaults; ``InvalidInputError`` names a bad one."""
    unknown = sorted(set(params) - {*DEFAULTS, "tokenizer"})
    if unknown:
        raise InvalidInputError(f"MINHASHLSH index: unknown parameter(s) {unknown} "
                                f"(accepted: num_bands, num_hashes, shingle_size, tokenizer)")
    out = {**DEFAULTS, **{k: v for k, v in params.items() if k != "tokenizer"}}
    for k in DEFAULTS:
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidInputError(f"MINHASHLSH index: {k} must be an integer, got {v!r}")
    if not 1 <= out["num_hashes"] <= 4096:
        raise InvalidInputError(f"MINHASHLSH index requires 1 <= num_hashes <= 4096, got {out['num_hashes']}")
    if not 1 <= out["num_bands"] <= 256:
        raise InvalidInputError(f"MINHASHLSH index requires 1 <= num_bands <= 256, got {out['num_bands']}")
    if out["num_hashes"] % out["num_bands"]:
        raise InvalidInputError("MINHASHLSH index requires num_hashes to be a multiple of num_bands, got "
                                f"num_hashes={out['num_hashes']} num_bands={out['num_bands']}")
    if out["shingle_size"] <= 0:
        raise InvalidInputError("MINHASHLSH index requires shingle_size > 0")
    tok = params.get("tokenizer") or {}
    if not isinstance(tok, Mapping):
        raise InvalidInputError(f"MINHASHLSH index: tokenizer must be a mapping, got {tok!r}")
    bad = sorted(set(tok) - set(TOKENIZER_DEFAULTS))
    if bad:
        raise UnsupportedError(f"MINHASHLSH index: tokenizer setting(s) {bad} are not supported by this "
                               f"library (supported: {sorted(TOKENIZER_DEFAULTS)})")
    return MinHashParams(**out, tokenizer=MinHashTokenizer(**{**TOKENIZER_DEFAULTS, **tok}))


def analyzer_params(params: MinHashParams) -> TokenizerParams:
    """The FTS analyzer settings of the MinHash tokenizer."""
    from lance_spark_ops.index.fts.tokenizer import check_params as fts_check

    return fts_check(params.tokenizer.as_dict())


def details(params: MinHashParams) -> bytes:
    """The serialized ``MinHashLshIndexDetails`` (also hex-encoded in the files' metadata)."""
    t = params.tokenizer
    tok = table_pb2.InvertedIndexDetails(
        base_tokenizer=t.base_tokenizer, language=f'"{t.language}"', with_position=False,
        max_token_length=t.max_token_length, lower_case=t.lower_case, stem=t.stem,
        remove_stop_words=t.remove_stop_words, ascii_folding=t.ascii_folding, min_ngram_length=3,
        max_ngram_length=3, block_size=128, posting_format_version=2)
    if t.max_token_length is None:
        tok.ClearField("max_token_length")
    body = tok.SerializeToString()

    v = encode_varint
    return (b"\x08" + v(params.num_hashes) + b"\x10" + v(params.num_bands)
            + b"\x18" + v(params.shingle_size) + b"\x22" + v(len(body)) + body)


def _splitmix(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


@dataclass(frozen=True)
class Generator:
    """The permutations (a, b) and compressors (c) of a signature width."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray

    @staticmethod
    def of(num_hashes: int) -> Generator:
        state, a, b, c = SEED, [], [], []
        for _ in range(num_hashes):
            state, x = _splitmix(state)
            a.append(x | 1)
            state, x = _splitmix(state)
            b.append(x)
        for _ in range(num_hashes):
            state, x = _splitmix(state)
            c.append(x | 1)
        return Generator(np.array(a, np.uint64), np.array(b, np.uint64), np.array(c, np.uint64))


def sign(texts: pa.Array, analyzer: Analyzer, shingle_size: int, gen: Generator
         ) -> tuple[np.ndarray, np.ndarray]:
    """(rows of ``texts`` with a signature, ascending; their signatures uint16 [docs, num_hashes]):
    the compiled kernel straight from the tokens, else ``shingle_hashes`` then ``signatures``."""
    kernels = compiled_kernels()
    if kernels is None:
        return signatures(*shingle_hashes(texts, analyzer, shingle_size), gen)
    tokens = analyzer.tokenize(texts)
    per_doc = np.bincount(tokens.doc, minlength=len(texts))
    docs = np.flatnonzero(per_doc)
    sig = np.empty((docs.size, gen.a.size), np.uint16)
    if docs.size:
        vocab = pa.array(tokens.vocab, pa.large_string())
        offs = np.frombuffer(vocab.buffers()[1], np.int64, count=len(vocab) + 1)
        data = np.frombuffer(vocab.buffers()[2], np.uint8) if offs[-1] else np.zeros(1, np.uint8)
        bounds = np.concatenate([[0], np.cumsum(per_doc[docs])]).astype(np.int64)
        kernels.token_signatures(data, offs, np.ascontiguousarray(tokens.token, np.int64), bounds,
                                 shingle_size, np.uint64(SEED), gen.a, gen.b, gen.c, sig)
    return docs, sig


def shingle_hashes(texts: pa.Array, analyzer: Analyzer, shingle_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(XXH64 of every shingle, its document's row in ``texts``), documents in order."""
    tokens = analyzer.tokenize(texts)
    if not tokens.token.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    words = pa.array(tokens.vocab, pa.large_string()).take(pa.array(tokens.token))
    offs = np.frombuffer(words.buffers()[1], np.int64, count=len(words) + 1, offset=words.offset * 8)
    lengths = np.diff(offs)
    raw = np.frombuffer(words.buffers()[2], np.uint8)[offs[0]:offs[-1]] if offs[-1] > offs[0] \
        else np.zeros(0, np.uint8)
    count = tokens.token.size
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])  # each token followed by a separator
    buf = np.full(int(lengths.sum()) + count, SEPARATOR, np.uint8)
    buf[np.arange(raw.size) + np.repeat(np.arange(count), lengths)] = raw
    per_doc = np.bincount(tokens.doc, minlength=len(texts))
    first = np.concatenate([[0], np.cumsum(per_doc)[:-1]])
    docs = np.flatnonzero(per_doc)
    window = np.minimum(shingle_size, per_doc[docs])
    n_sh = per_doc[docs] - window + 1
    owner = np.repeat(docs, n_sh)
    offset = np.arange(int(n_sh.sum())) - np.repeat(np.concatenate([[0], np.cumsum(n_sh)[:-1]]), n_sh)
    lo = np.repeat(first[docs], n_sh) + offset
    hi = lo + np.repeat(window, n_sh) - 1
    return hash_many(buf, starts[lo], starts[hi] + lengths[hi] - starts[lo]), owner


def signatures(hashes: np.ndarray, owner: np.ndarray, gen: Generator) -> tuple[np.ndarray, np.ndarray]:
    """(docs with a signature, ascending; their signatures uint16 [docs, num_hashes])."""
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if owner.size else np.zeros(0, np.int64)
    docs = owner[first]  # owners ascend: a document's shingles are one run
    k = gen.a.size
    mins = np.empty((docs.size, k), np.uint64)
    bounds = np.append(first, owner.size).astype(np.int64)
    kernels = compiled_kernels()
    if kernels is not None:
        sig = np.empty((docs.size, k), np.uint16)
        kernels.doc_signatures(np.ascontiguousarray(hashes, np.uint64), bounds, gen.a, gen.b, gen.c, sig)
        return docs, sig
    with np.errstate(over="ignore"):
        d = 0
        while d < docs.size:  # whole documents per chunk of about SHINGLE_CHUNK shingles
            e = int(np.searchsorted(bounds, bounds[d] + SHINGLE_CHUNK, side="right")) - 1
            e = min(max(e, d + 1), docs.size)
            h = hashes[bounds[d]:bounds[e]]
            perm = gen.a[:, None] * h[None, :]  # hashes x shingles: reductions run along rows
            perm += gen.b[:, None]
            mins[d:e] = np.minimum.reduceat(perm, bounds[d:e] - bounds[d], axis=1).T
            d = e
        sig = ((mins * gen.c[None, :]) >> np.uint64(48)).astype(np.uint16)
    return docs, sig


_loaded: list[Any] = []


def compiled_kernels() -> Any:
    """``minhash_kernels`` (compiled or loaded from numba's cache, once per process), or None
    (numba missing, ``LSO_NO_COMPILED=1``, a failure): the numpy code runs then."""
    if not _loaded:
        _loaded.append(load("lance_spark_ops.index.scalar.minhash_kernels", _warm, "MinHash"))
    return _loaded[0]


def _warm(k: Any) -> None:
    one = np.ones(1, np.uint64)
    k.doc_signatures(one, np.array([0, 1], np.int64), one, one, one, np.zeros((1, 1), np.uint16))
    k.xxh64_many(np.zeros(40, np.uint8), np.zeros(1, np.int64), np.array([40], np.int64), np.uint64(SEED),
                 np.zeros(1, np.uint64))
    k.token_signatures(np.zeros(1, np.uint8), np.array([0, 1], np.int64), np.zeros(1, np.int64),
                       np.array([0, 1], np.int64), 3, np.uint64(SEED), one, one, one,
                       np.zeros((1, 1), np.uint16))
    keys = np.zeros((1, 1), np.uint64)
    k.band_keys(np.zeros((1, 1), np.uint16), 1, np.uint64(SEED), keys)
    k.sort_bands(keys, np.zeros(1, np.uint64), np.zeros(1, np.uint32))


def hash_many(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """XXH64 (seed 42) of byte ranges: the compiled kernel, else the vectorised numpy code."""
    kernels = compiled_kernels()
    if kernels is None:
        return xxh64(data, starts, lengths, seed=SEED)
    data = np.concatenate([np.asarray(data, np.uint8), np.zeros(8, np.uint8)])
    out = np.empty(len(starts), np.uint64)
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    kernels.xxh64_many(data, starts, lengths, np.uint64(SEED), out)
    return out


def signature_matrix(col: pa.ChunkedArray | pa.Array, num_hashes: int) -> np.ndarray:
    """uint16 [rows, num_hashes] of a ``signature`` column."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return np.zeros((0, num_hashes), np.uint16)
    values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), np.uint16)  # no copy when uint16
    if values.size != len(arr) * num_hashes:
        raise CorruptFileError(f"{SIGNATURES}: {values.size} values for {len(arr)} signatures of "
                               f"{num_hashes}")
    return values.reshape(len(arr), num_hashes)


def band_keys(sig: np.ndarray, num_bands: int) -> np.ndarray:
    """uint64 [docs, num_bands]: band id << 56 | low 56 bits of the band's XXH64."""
    n, k = sig.shape
    kernels = compiled_kernels()
    if kernels is not None:
        out = np.empty((n, num_bands), np.uint64)
        kernels.band_keys(np.ascontiguousarray(sig, np.uint16), num_bands, np.uint64(SEED), out)
        return out
    width = k // num_bands
    data = np.ascontiguousarray(sig.astype("<u2")).view(np.uint8).reshape(-1)
    starts = (np.arange(n)[:, None] * (2 * k) + np.arange(num_bands)[None, :] * (2 * width)).reshape(-1)
    h = hash_many(data, starts, np.full(starts.size, 2 * width, np.int64)).reshape(n, num_bands)
    return (np.arange(num_bands, dtype=np.uint64)[None, :] << np.uint64(56)) | (h & np.uint64((1 << 56) - 1))


def signature_schema(num_hashes: int, details_hex: str) -> pa.Schema:
    meta = {"lance-encoding:structural-encoding": "fullzip", "lance-encoding:compression": "none"}
    sig = pa.field("signature", pa.list_(pa.field("item", pa.uint16()), num_hashes), nullable=False,
                   metadata=meta)
    return pa.schema([pa.field("_rowid", pa.uint64(), nullable=False), sig],
                     metadata={"minhash_lsh_index_version": "0", "minhash_lsh_details": details_hex})


def bands_schema(details_hex: str, num_docs: int) -> pa.Schema:
    none = {"lance-encoding:compression": "none"}
    return pa.schema([pa.field("band_key", pa.uint64(), nullable=False, metadata=none),
                      pa.field("doc_id", pa.uint32(), nullable=False, metadata=none)],
                     metadata={"minhash_lsh_index_version": "0", "minhash_lsh_num_docs": str(num_docs),
                               "minhash_lsh_page_table_buffer": "1", "minhash_lsh_details": details_hex,
                               "minhash_lsh_page_rows": str(PAGE_ROWS)})


def signature_table(ids: np.ndarray, sig: np.ndarray, details_hex: str) -> pa.Table:
    k = sig.shape[1]
    schema = signature_schema(k, details_hex)
    values = pa.array(sig.reshape(-1), pa.uint16())
    col = pa.FixedSizeListArray.from_arrays(values, type=schema.field("signature").type)
    return pa.Table.from_arrays([pa.array(ids, pa.uint64()), col], schema=schema)


def bands_table(sig: np.ndarray, num_bands: int, details_hex: str) -> tuple[pa.Table, bytes]:
    """The sorted (band key, doc id) rows and the page table (last key of every page)."""
    keys = band_keys(sig, num_bands)
    kernels = compiled_kernels()
    if kernels is not None:  # a radix sort band by band (a band's keys share their top 8 bits)
        flat = np.empty(keys.size, np.uint64)
        docs = np.empty(keys.size, np.uint32)
        kernels.sort_bands(keys, flat, docs)
    else:
        docs = np.repeat(np.arange(sig.shape[0], dtype=np.uint32), num_bands)
        flat = keys.reshape(-1)
        order = np.argsort(flat, kind="stable")  # keys are distinct within a doc: ties keep doc order
        flat, docs = flat[order], docs[order]
    page_last = flat[np.minimum(np.arange(PAGE_ROWS, flat.size + PAGE_ROWS - 1, PAGE_ROWS), flat.size) - 1] \
        if flat.size else np.zeros(0, np.uint64)
    table = pa.Table.from_arrays([pa.array(flat, pa.uint64()), pa.array(docs, pa.uint32())],
                                 schema=bands_schema(details_hex, sig.shape[0]))
    return table, page_last.astype("<u8").tobytes()


def parse_details(value: bytes) -> MinHashParams:
    """The parameters of a ``MinHashLshIndexDetails`` (``check_params``' shape); an unknown
    signature version or tokenizer is an ``UnsupportedError``."""
    pos, out = 0, {}
    tok = b""

    def varint(at: int) -> tuple[int, int]:
        v, shift = 0, 0
        while True:
            b = value[at]
            v |= (b & 0x7F) << shift
            at += 1
            if not b & 0x80:
                return v, at
            shift += 7

    value = bytes(value)
    while pos < len(value):
        key, pos = varint(pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = varint(pos)
            out[field] = v
        elif wire == 2:
            n, pos = varint(pos)
            if field == 4:
                tok = value[pos:pos + n]
            pos += n
        else:
            raise UnsupportedError(f"MINHASHLSH details: unexpected wire type {wire} of field {field}")
    if out.get(5, 0) != 0:
        raise UnsupportedError(f"MINHASHLSH index of signature_version {out[5]}: only 0 is reproduced")
    d = table_pb2.InvertedIndexDetails.FromString(tok)
    language = d.language[1:-1] if d.language.startswith('"') else d.language
    max_len = d.max_token_length if d.HasField("max_token_length") else None
    tokenizer = {"base_tokenizer": d.base_tokenizer if d.HasField("base_tokenizer") else "simple",
                 "language": language, "max_token_length": max_len, "lower_case": d.lower_case,
                 "stem": d.stem, "remove_stop_words": d.remove_stop_words, "ascii_folding": d.ascii_folding}
    return check_params({"num_hashes": out.get(1, 0), "num_bands": out.get(2, 0),
                         "shingle_size": out.get(3, 0), "tokenizer": tokenizer})
