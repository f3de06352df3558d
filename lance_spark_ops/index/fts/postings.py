"""One FTS partition's tables (``part_<id>_{tokens,invert,docs}.lance``) from a token stream
(no I/O).

Layout: FTS format 1 (Lance 1.0's; pylance 14 reads it, and writes it itself under
``LANCE_FTS_FORMAT_VERSION=1``: tests/index/test_build_fts.py compares the files; no
``posting_tail_codec`` / ``posting_block_size`` / ``format_version`` keys mean 128-row blocks
with a fixed-32-bit tail and per-document position lists):
- docs: ``_rowid`` u64 (row address, or stable row id), ``_num_tokens`` u32; a document's id
  is its row in this table.
- tokens (``token_set_format`` "arrow"): ``_token`` utf8, ``_token_id`` u32, sorted by token
  bytes (pylance loads them into an FST, which needs that order).
- invert: one row per token id: ``_posting`` list<large_binary> of blocks, ``_max_score`` f32,
  ``_length`` u32 (documents holding the token), and with positions ``_position``
  list<list<large_binary>>. A full block (128 documents): f32 block max score, u32 first doc
  id, u8 bits + BitPacker4x-packed doc id deltas, u8 bits + packed frequencies; the last,
  partial block: f32 score, u32 doc ids, u32 frequencies. A document's positions: u32 count,
  then packed blocks of 128 sorted positions (u32 first, u8 bits, packed deltas), then the raw
  u32 tail. Block max scores are BM25 upper bounds computed as pylance does, in float32.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BLOCK = 128
K1 = np.float32(1.2)
B = np.float32(0.75)

DOCS_SCHEMA = pa.schema([pa.field("_rowid", pa.uint64(), False), pa.field("_num_tokens", pa.uint32(), False)])
TOKENS_SCHEMA = pa.schema([pa.field("_token", pa.utf8(), False), pa.field("_token_id", pa.uint32(), False)])


def invert_schema(with_position: bool) -> pa.Schema:
    fields = [pa.field("_posting", pa.list_(pa.field("item", pa.large_binary())), False),
              pa.field("_max_score", pa.float32(), False),
              pa.field("_length", pa.uint32(), False)]
    if with_position:
        fields.append(pa.field("_position", pa.list_(pa.field("item", pa.list_(
            pa.field("item", pa.large_binary())))), False))
    return pa.schema(fields)


def idf(df: np.ndarray, num_docs: int) -> np.ndarray:
    """BM25 idf in float32 as Rust computes it; the logarithm correctly rounded (Rust's
    ``f32::ln`` is libm's ``logf``; numpy's float32 log can be an ulp off)."""
    n = np.float32(num_docs)
    d = df.astype(np.float32)
    arg = (n - d + np.float32(0.5)) / (d + np.float32(0.5)) + np.float32(1.0)
    return np.log(arg.astype(np.float64)).astype(np.float32)


def _num_bits(x: np.ndarray) -> np.ndarray:
    """Bits needed for the max of each row (0 for all zeros)."""
    m = x.max(axis=1).astype(np.uint64)
    bits = np.zeros(len(m), dtype=np.uint8)
    nz = m > 0
    bits[nz] = (np.floor(np.log2(m[nz].astype(np.float64))) + 1).astype(np.uint8)
    return bits


def pack4x_matrix(blocks: np.ndarray, b: int) -> np.ndarray:
    """BitPacker4x of blocks all packed with ``b`` bits: (n, 16 b) uint8, one block a row.

    Value i of a lane starts at bit i b of the lane's words: it is shifted into a 64-bit
    accumulator of word (i b) // 32 and what passes bit 32 is carried into the next word (the
    values' bit ranges never overlap, so OR assembles them): 32 vectorised steps over all the
    blocks and lanes at once, ~10x faster than expanding every value into its bits."""
    n = len(blocks)
    v = blocks.astype(np.uint64).reshape(n, 32, 4)                       # [block, i, lane]
    if b < 32:
        v &= np.uint64((1 << b) - 1)
    acc = np.zeros((n, b + 1, 4), dtype=np.uint64)                      # [block, word, lane]
    for i in range(32):
        w, s = divmod(i * b, 32)
        acc[:, w, :] |= v[:, i, :] << np.uint64(s)
    words = acc[:, :b, :] & np.uint64(0xFFFFFFFF)
    words[:, 1:, :] |= acc[:, :b - 1, :] >> np.uint64(32)
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(n, 16 * b)


def pack4x(blocks: np.ndarray, bits: np.ndarray) -> list[bytes]:
    """BitPacker4x: each 128-value block as 4 interleaved lanes (value i in lane i % 4), each
    lane's 32 values packed LSB first into ``bits`` u32 words, word w of lane l at byte
    16 w + 4 l. ``blocks``: (n, 128) uint32."""
    out: list[bytes] = [b""] * len(blocks)
    for b in np.unique(bits):
        if b == 0:
            continue
        sel = np.nonzero(bits == b)[0]
        flat = pack4x_matrix(blocks[sel], int(b))
        for k, i in enumerate(sel):
            out[i] = flat[k].tobytes()
    return out


def _put_packed(buf: np.ndarray, at: np.ndarray, blocks: np.ndarray, bits: np.ndarray) -> None:
    """Write each block's ``pack4x`` bytes into ``buf`` from byte ``at`` of the block."""
    for b in np.unique(bits):
        if b == 0:
            continue
        sel = np.nonzero(bits == b)[0]
        buf[at[sel][:, None] + np.arange(16 * int(b))] = pack4x_matrix(blocks[sel], int(b))


def full_blocks(scores: np.ndarray, docs: np.ndarray, freqs: np.ndarray) -> pa.Array:
    """The full posting blocks as one large_binary array, built in place (no per-block
    Python): f32 score, u32 first doc, u8 bits + packed doc deltas, u8 bits + packed
    frequencies. ``docs`` / ``freqs``: (n, 128)."""
    n = len(docs)
    d = _deltas(docs)
    dbits, fbits = _num_bits(d), _num_bits(freqs)
    size = 10 + 16 * (dbits.astype(np.int64) + fbits.astype(np.int64))
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size, out=offs[1:])
    buf = np.zeros(int(offs[-1]), dtype=np.uint8)
    start = offs[:-1]
    buf[start[:, None] + np.arange(4)] = scores.astype("<f4").view(np.uint8).reshape(n, 4)
    buf[start[:, None] + np.arange(4, 8)] = docs[:, 0].astype("<u4").view(np.uint8).reshape(n, 4)
    buf[start + 8] = dbits
    _put_packed(buf, start + 9, d, dbits)
    fat = start + 9 + 16 * dbits.astype(np.int64)
    buf[fat] = fbits
    _put_packed(buf, fat + 1, freqs, fbits)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offs.tobytes()),
                                                        pa.py_buffer(buf.tobytes())])


def _run_starts(keys: np.ndarray, n: int) -> np.ndarray:
    """First index of each of the ``n`` runs of the non-decreasing ``keys`` (0..n-1, all present)."""
    return np.searchsorted(keys, np.arange(n), side="left")


def _deltas(blocks: np.ndarray) -> np.ndarray:
    d = np.diff(blocks.astype(np.int64), axis=1, prepend=blocks[:, :1].astype(np.int64))
    return d.astype(np.uint32)


def sorted_blocks(blocks: np.ndarray) -> list[bytes]:
    """Each sorted block as pylance compresses it: u32 first value, u8 bits, packed deltas."""
    d = _deltas(blocks)
    bits = _num_bits(d)
    packed = pack4x(d, bits)
    firsts = blocks[:, 0].astype("<u4")
    return [firsts[i].tobytes() + bytes([int(bits[i])]) + packed[i] for i in range(len(blocks))]


def occurrence_order(tid: np.ndarray, doc: np.ndarray, position: np.ndarray, ntok: int) -> np.ndarray:
    """The order of the occurrences by (token, doc, position). Streams already in (doc,
    position) order (a tokenized scan) need only a stable sort by token: a radix sort for
    fewer than 65 536 tokens, ~10x faster than the three-key ``lexsort``."""
    n = len(tid)
    if n > 1:
        d = np.diff(doc.astype(np.int64))
        if bool(np.all((d > 0) | ((d == 0) & (np.diff(position.astype(np.int64)) > 0)))):
            key = tid.astype(np.uint16) if ntok <= 1 << 16 else tid
            return np.argsort(key, kind="stable")
    return np.lexsort((position, doc, tid))


def build_partition(row_ids: np.ndarray, num_tokens: np.ndarray, doc: np.ndarray, token: np.ndarray,
                    position: np.ndarray, vocab: list[str], with_position: bool,
                    ) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(docs, tokens, invert) tables of one partition. ``doc`` indexes ``row_ids``; ``token``
    indexes ``vocab`` (distinct strings); one entry per token occurrence."""
    docs = pa.table([pa.array(row_ids, pa.uint64()), pa.array(num_tokens, pa.uint32())], schema=DOCS_SCHEMA)
    # token ids: rank of the token's UTF-8 bytes
    vocab_arr = pa.array(vocab, pa.utf8())
    order = pc.array_sort_indices(vocab_arr.cast(pa.binary())).to_numpy().astype(np.int64)
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[order] = np.arange(len(vocab))
    tokens = pa.table([vocab_arr.take(pa.array(order)), pa.array(np.arange(len(vocab)), pa.uint32())],
                      schema=TOKENS_SCHEMA)
    tid = rank[token]
    o = occurrence_order(tid, doc, position, len(vocab))
    tid, d, p = tid[o], doc[o].astype(np.int64), position[o].astype(np.uint32)
    # (token, doc) pairs and their frequencies
    new_pair = np.ones(len(tid), dtype=bool)
    if len(tid):
        new_pair[1:] = (tid[1:] != tid[:-1]) | (d[1:] != d[:-1])
    pair_start = np.nonzero(new_pair)[0]
    freq = np.diff(np.append(pair_start, len(tid))).astype(np.uint32)
    ptok, pdoc = tid[pair_start], d[pair_start].astype(np.uint32)
    ntok = len(vocab)
    posting, max_score, df = posting_column(ptok, pdoc, freq, ntok, num_tokens)
    tok_start = np.concatenate([[0], np.cumsum(df)])
    cols = [posting, pa.array(max_score, pa.float32()), pa.array(df.astype(np.uint32), pa.uint32())]
    if with_position:
        cols.append(_positions(p, freq, tok_start))
    invert = pa.table(cols, schema=invert_schema(with_position))
    return docs, tokens, invert


def posting_column(ptok: np.ndarray, pdoc: np.ndarray, freq: np.ndarray, ntok: int,
                   num_tokens: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(``_posting`` blocks, ``_max_score``, document frequency) per token id ``0..ntok-1`` from
    the (token, doc) pairs sorted by token then doc, with their frequencies; ``num_tokens``
    per document (BM25 statistics: its length and sum)."""
    num_docs = len(num_tokens)
    df = np.bincount(ptok, minlength=ntok).astype(np.int64)
    tok_start = np.concatenate([[0], np.cumsum(df)])
    # per-pair BM25 term factor, then per-block max times idf * (k1 + 1)
    total = np.float32(num_tokens.sum(dtype=np.uint64))
    avgdl = np.float32(total / np.float32(num_docs)) if num_docs else np.float32(0)
    nt = num_tokens.astype(np.float32)[pdoc]
    doc_norm = K1 * ((np.float32(1.0) - B) + B * nt / avgdl)
    f = freq.astype(np.float32)
    score = (f / (f + doc_norm)).astype(np.float32)
    idx_in_tok = np.arange(len(ptok)) - tok_start[ptok]
    blk = idx_in_tok // BLOCK
    nblocks = (df + BLOCK - 1) // BLOCK
    blk_start = np.concatenate([[0], np.cumsum(nblocks)])
    gblk = blk_start[ptok] + blk
    # pairs are sorted by (token, doc): blocks and tokens are contiguous runs
    bmax = np.maximum.reduceat(score, _run_starts(gblk, int(blk_start[-1]))) \
        if len(score) else np.empty(0, np.float32)
    weight = (idf(df, num_docs) * (K1 + np.float32(1.0))).astype(np.float32)
    blk_tok = np.repeat(np.arange(ntok), nblocks)
    bmax = (bmax * weight[blk_tok]).astype(np.float32)
    max_score = np.maximum.reduceat(bmax, blk_start[:-1]) if len(bmax) else np.empty(0, np.float32)

    # block payloads: full blocks packed, partial (tail) blocks raw, in global block order
    full = np.nonzero((idx_in_tok % BLOCK == 0) & (idx_in_tok + BLOCK <= df[ptok]))[0]
    parts, order = [], []
    if len(full):
        sel = full[:, None] + np.arange(BLOCK)
        parts.append(full_blocks(bmax[gblk[full]], pdoc[sel], freq[sel]))
        order.append(gblk[full])
    tail_len = (df % BLOCK)[ptok]
    in_tail = idx_in_tok >= df[ptok] - tail_len            # pairs of each token's partial block
    tails = np.nonzero((df % BLOCK) > 0)[0]
    if len(tails):
        last = blk_start[tails + 1] - 1
        parts.append(_tail_blocks(bmax[last], df[tails] % BLOCK, pdoc[in_tail], freq[in_tail]))
        order.append(last)
    if parts:
        blocks = pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    else:
        blocks = pa.array([], pa.large_binary())
    posting = pa.ListArray.from_arrays(pa.array(blk_start.astype(np.int32)), blocks,
                                       type=pa.list_(pa.field("item", pa.large_binary())))
    return posting, max_score, df


def _binary(words: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A large_binary array over little-endian u32 ``words``; ``offsets`` in words."""
    data = pa.py_buffer(words.astype("<u4").tobytes())
    offs = pa.py_buffer((offsets.astype(np.int64) * 4).tobytes())
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, [None, offs, data])


def _tail_blocks(score: np.ndarray, n: np.ndarray, docs: np.ndarray, freqs: np.ndarray) -> pa.Array:
    """Partial blocks: f32 score, n u32 doc ids, n u32 frequencies (per block, vectorised)."""
    size = 1 + 2 * n.astype(np.int64)
    start = np.concatenate([[0], np.cumsum(size)])
    words = np.empty(int(start[-1]), dtype=np.uint32)
    words[start[:-1]] = score.astype(np.float32).view(np.uint32)
    first = np.repeat(start[:-1] + 1, n)
    j = np.arange(len(docs)) - np.repeat(np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    words[first + j] = docs
    words[first + np.repeat(n, n) + j] = freqs
    return _binary(words, start)


def _positions(p: np.ndarray, freq: np.ndarray, tok_start: np.ndarray) -> pa.Array:
    """list (per token) of list (per document) of binaries: [u32 count, packed blocks..., tail]."""
    npairs = len(freq)
    pair_off = np.concatenate([[0], np.cumsum(freq.astype(np.int64))])
    nfull = (freq // BLOCK).astype(np.int64)
    tail = (freq % BLOCK).astype(np.int64)
    nbin = 1 + nfull + (tail > 0)
    # every pair's [count] and [raw tail] binaries, vectorised (the tail: positions after the
    # pair's full blocks, all of them when it has fewer than 128)
    words = np.empty(npairs + int(tail.sum()), dtype=np.uint32)
    tail_off = np.concatenate([[0], np.cumsum(tail)])
    cpos = tail_off[:-1] + np.arange(npairs)
    words[cpos] = freq
    in_tail = np.arange(len(p)) - np.repeat(pair_off[:-1], freq) >= np.repeat(nfull * BLOCK, freq)
    mask = np.ones(len(words), dtype=bool)
    mask[cpos] = False
    words[mask] = p[in_tail]
    offs = np.empty(2 * npairs + 1, dtype=np.int64)
    offs[0] = 0
    offs[1::2] = cpos + 1
    offs[2::2] = tail_off[1:] + np.arange(1, npairs + 1)
    values = _binary(words, offs)            # item 2 i: count of pair i, 2 i + 1: its tail
    big = np.nonzero(nfull)[0]
    if len(big):
        # pairs with >= 128 positions (rare): their packed blocks go between count and tail
        rows = np.concatenate([pair_off[i] + np.arange(nfull[i] * BLOCK) for i in big])
        blocks = pa.array(sorted_blocks(p[rows].reshape(-1, BLOCK)), pa.large_binary())
        block_first = np.concatenate([[0], np.cumsum(nfull[big])])
        first_block = np.zeros(npairs, dtype=np.int64)
        first_block[big] = block_first[:-1]
        start = np.concatenate([[0], np.cumsum(nbin)])
        take = np.empty(int(start[-1]), dtype=np.int64)
        take[start[:-1]] = 2 * np.arange(npairs)
        has_tail = np.nonzero(tail > 0)[0]
        take[start[has_tail + 1] - 1] = 2 * has_tail + 1
        k = np.arange(int(nfull.sum())) - np.repeat(block_first[:-1], nfull[big])
        at = np.repeat(start[big] + 1, nfull[big]) + k
        take[at] = 2 * npairs + np.repeat(first_block[big], nfull[big]) + k
        values = pa.concat_arrays([values, blocks]).take(pa.array(take))
    inner_off = np.concatenate([[0], np.cumsum(nbin)]).astype(np.int32)
    inner = pa.ListArray.from_arrays(pa.array(inner_off), values,
                                     type=pa.list_(pa.field("item", pa.large_binary())))
    return pa.ListArray.from_arrays(pa.array(tok_start.astype(np.int32)), inner,
                                    type=invert_schema(True).field("_position").type)


def unpack4x(data: np.ndarray, starts: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """The inverse of ``pack4x``: (n, 128) uint32 from the packed blocks at byte ``starts`` of
    ``data`` (uint8), ``bits`` each. Value i of a lane is read from its word (i b) // 32 and
    the next one joined in 64 bits, shifted and masked (32 vectorised steps a width)."""
    out = np.zeros((len(starts), BLOCK), dtype=np.uint32)
    for b in np.unique(bits):
        if b == 0:
            continue
        b = int(b)
        sel = np.nonzero(bits == b)[0]
        raw = data[starts[sel][:, None] + np.arange(16 * b)]              # [block, 16 b]
        words = np.zeros((len(sel), b + 1, 4), dtype=np.uint64)           # [block, word, lane]
        words[:, :b, :] = np.ascontiguousarray(raw).view("<u4").reshape(len(sel), b, 4)
        mask = np.uint64((1 << b) - 1)
        vals = np.empty((len(sel), 32, 4), dtype=np.uint64)               # [block, i, lane]
        for i in range(32):
            w, s = divmod(i * b, 32)
            vals[:, i, :] = ((words[:, w, :] | (words[:, w + 1, :] << np.uint64(32))) >> np.uint64(s)) & mask
        out[sel] = vals.reshape(len(sel), BLOCK).astype(np.uint32)
    return out


def decode_postings(posting: pa.Array, df: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token id, doc id, frequency) of every pair of a ``_posting`` column (blocks as
    ``posting_column`` writes them), sorted by token then doc; ``df``: ``_length``."""
    from lance_spark_ops.errors import CorruptFileError

    posting = posting.combine_chunks() if isinstance(posting, pa.ChunkedArray) else posting
    df = np.asarray(df, dtype=np.int64)
    nblocks = np.diff(np.asarray(posting.offsets, dtype=np.int64))
    if not np.array_equal(nblocks, (df + BLOCK - 1) // BLOCK):
        raise CorruptFileError("FTS _posting: block counts do not match _length")
    blocks = posting.flatten()
    if blocks.type != pa.large_binary():
        blocks = blocks.cast(pa.large_binary())
    offs = np.frombuffer(blocks.buffers()[1], np.int64, len(blocks) + 1, blocks.offset * 8)
    buf = blocks.buffers()[2]
    data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    starts = offs[:-1]
    blk_tok = np.repeat(np.arange(len(df)), nblocks)
    last = np.zeros(len(starts), dtype=bool)
    last[np.cumsum(nblocks)[nblocks > 0] - 1] = True
    tail = last & (df[blk_tok] % BLOCK > 0)
    full = np.nonzero(~tail)[0]
    doc = np.zeros((len(starts), BLOCK), dtype=np.uint32)
    freq = np.zeros((len(starts), BLOCK), dtype=np.uint32)
    if len(full):
        s = starts[full]
        first = data[s[:, None] + np.arange(4, 8)].copy().view("<u4").reshape(-1)
        dbits = data[s + 8]
        deltas = unpack4x(data, s + 9, dbits)
        doc[full] = (first[:, None].astype(np.int64)
                     + np.cumsum(deltas, axis=1, dtype=np.int64)).astype(np.uint32)
        fs = s + 9 + 16 * dbits.astype(np.int64)
        freq[full] = unpack4x(data, fs + 1, data[fs])
    count = np.full(len(starts), BLOCK, dtype=np.int64)
    tails = np.nonzero(tail)[0]
    count[tails] = df[blk_tok[tails]] % BLOCK
    if np.any(offs[tails + 1] - offs[tails] != 4 + 8 * count[tails]):
        raise CorruptFileError("FTS _posting: a partial block's size does not match _length")
    if len(tails):
        n = count[tails]
        own = np.repeat(np.arange(len(tails)), n)
        j = np.arange(int(n.sum())) - np.repeat(np.concatenate([[0], np.cumsum(n)[:-1]]), n)
        at = starts[tails][own] + 4 + 4 * j
        docs_t = _u32_at(data, at)
        freqs_t = _u32_at(data, at + 4 * n[own])
        doc[tails[own], j] = docs_t
        freq[tails[own], j] = freqs_t
    valid = np.arange(BLOCK)[None, :] < count[:, None]
    return np.repeat(blk_tok, count).astype(np.int64), doc[valid], freq[valid]


def _u32_at(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Little-endian u32 at each byte offset ``at`` of ``data``."""
    b = data[at[:, None] + np.arange(4)].astype(np.uint32)
    return b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
