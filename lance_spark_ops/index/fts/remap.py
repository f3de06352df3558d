"""One FTS partition (format 1, arrow token set) remapped through row-address maps, as
pylance 14's compaction remaps it (no I/O).

Documents whose row is gone are dropped from the docs table and from every posting; the
documents left keep their order and are renumbered (a document's id is its row in the docs
table); tokens left with no document are dropped and the others renumbered in their order.
Positions of the pairs that stay are carried over byte for byte. Posting blocks and BM25
block maxima are written again from the remapped statistics (pylance's query-time scores
only read documents and frequencies, so answers equal its remap's).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.address_map import RowAddressMap
from lance_spark_ops.index.fts.postings import (
    DOCS_SCHEMA,
    TOKENS_SCHEMA,
    decode_postings,
    invert_schema,
    posting_column,
)


def remap_partition(docs: pa.Table, tokens: pa.Table, invert: pa.Table, maps: Sequence[RowAddressMap],
                    where: str = "FTS partition") -> tuple[pa.Table, pa.Table, pa.Table]:
    """(docs, tokens, invert) of the partition after the ``maps`` (applied in order)."""
    row_ids = docs.column("_rowid").to_numpy().astype(np.uint64)
    num_tokens = docs.column("_num_tokens").to_numpy().astype(np.uint32)
    keep = np.ones(len(row_ids), dtype=bool)
    ids = row_ids
    for m in maps:
        k, ids = m.apply(ids)
        keep[np.flatnonzero(keep)[~k]] = False
    new_doc = np.cumsum(keep) - 1
    df = invert.column("_length").to_numpy().astype(np.int64)
    ntok = len(df)
    tok_ids = tokens.column("_token_id").to_numpy().astype(np.int64)
    if len(tok_ids) != ntok or (ntok and (tok_ids.min() < 0 or tok_ids.max() >= ntok
                                          or np.unique(tok_ids).size != ntok)):
        raise CorruptFileError(f"{where}: token ids are not 0..{ntok - 1} (one invert row each)")
    ptok, pdoc, freq = decode_postings(invert.column("_posting"), df)
    if len(pdoc) and int(pdoc.max()) >= len(row_ids):
        raise CorruptFileError(f"{where}: a posting names document {int(pdoc.max())} of {len(row_ids)}")
    pair_keep = keep[pdoc]
    ptok, pdoc, freq = ptok[pair_keep], new_doc[pdoc[pair_keep]].astype(np.uint32), freq[pair_keep]
    new_df = np.bincount(ptok, minlength=ntok)
    tok_keep = new_df > 0
    new_tok = np.cumsum(tok_keep) - 1
    nt = num_tokens[keep]
    posting, max_score, out_df = posting_column(new_tok[ptok], pdoc, freq, int(tok_keep.sum()), nt)
    cols = [posting, pa.array(max_score, pa.float32()), pa.array(out_df.astype(np.uint32), pa.uint32())]
    with_position = "_position" in invert.schema.names
    if with_position:
        cols.append(_kept_positions(invert.column("_position"), pair_keep, tok_keep, out_df))
    new_invert = pa.table(cols, schema=invert_schema(with_position))
    trow = tok_keep[tok_ids]
    new_tokens = pa.table([tokens.column("_token").filter(pa.array(trow)).cast(pa.utf8()),
                           pa.array(new_tok[tok_ids[trow]], pa.uint32())], schema=TOKENS_SCHEMA)
    new_docs = pa.table([pa.array(ids, pa.uint64()), pa.array(nt, pa.uint32())], schema=DOCS_SCHEMA)
    return new_docs, new_tokens, new_invert


def _kept_positions(col: pa.ChunkedArray | pa.Array, pair_keep: np.ndarray, tok_keep: np.ndarray,
                    df: np.ndarray) -> pa.Array:
    """The ``_position`` lists of the pairs that stay, under the tokens that stay."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    pairs = col.flatten()                     # one list of binaries per (token, doc) pair
    if len(pairs) != len(pair_keep):
        raise CorruptFileError(f"FTS _position: {len(pairs)} position lists for {len(pair_keep)} postings")
    kept = pc.filter(pairs, pa.array(pair_keep))
    offsets = np.concatenate([[0], np.cumsum(df)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), kept, type=invert_schema(True).field("_position").type)
