"""FTS (INVERTED) index tasks: tokenize a run of fragment rows into one index partition
(``part_<id>_{docs,tokens,invert}.lance``) and write ``metadata.lance``.

Each partition task reads at most ``rows`` live rows (whole fragments or row ranges of one),
so its memory is bounded by that, and writes its partition under a partition id the driver
chose: attempts write the same paths with the same bytes, leaving no orphan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.concurrency import map_concurrently, read_ahead
from lance_spark_ops.file.metadata import WHOLE_FILE_READ
from lance_spark_ops.file.writer import LanceFileWriter, write_table
from lance_spark_ops.index.fts.layout import doc_file, invert_file, metadata_schema, token_file
from lance_spark_ops.index.fts.postings import build_partition
from lance_spark_ops.index.fts.tokenizer import Analyzer, TokenizerParams
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.fragment_batch import FragmentBatch


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: rows ``start..stop`` (physical offsets; None = whole) of fragments."""

    uri: str
    version: int
    column: str
    params: TokenizerParams
    row_ids: bool
    dst: str                                   # segment directory relative to the dataset root
    part_id: int
    ranges: tuple[tuple[int, int | None, int | None], ...]
    file_version: str = "2.0"
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # docs files of an old segment: index exactly the rows they list (deleted ones included)
    only_rows_of: tuple[str, ...] | None = None
    timestamp: datetime | None = None  # the version's commit time, as the driver opened it


@dataclass(frozen=True)
class PartitionResult:
    part_id: int
    files: tuple[tuple[str, int], ...]
    docs: int


def _write(ds: Dataset, rel: str, table: pa.Table, version: str) -> int:
    return write_table(rel, table, version, ds.store)


def build_partition_task(spec: PartitionSpec, ctx: TaskContext) -> PartitionResult:
    ds = open_dataset(spec.uri, spec.version, spec.storage_options, spec.timestamp)  # once per worker
    only = None
    if spec.only_rows_of is not None:
        only = _listed_rows(ds, spec.only_rows_of, {f for f, _, _ in spec.ranges})
    tk = tokenize_rows(ds, spec.column, spec.params, spec.row_ids, spec.ranges, only)
    files = write_partition(ds, spec.dst, spec.part_id, tk, spec.params.with_position, spec.file_version)
    return PartitionResult(spec.part_id, tuple(files), len(tk.row_ids))


@dataclass
class Tokenized:
    """A partition's token stream: per document its row id and token count; per occurrence
    its document (index into ``row_ids``), token (index into ``vocab``) and position."""

    row_ids: np.ndarray
    num_tokens: np.ndarray
    doc: np.ndarray
    token: np.ndarray
    position: np.ndarray
    vocab: list[str]

    def only_docs(self, keep: np.ndarray, row_ids: np.ndarray) -> Tokenized:
        """The documents ``keep`` selects, renamed ``row_ids``, renumbered in order; tokens
        no document holds any more leave the vocabulary."""
        occ = keep[self.doc]
        new_doc = (np.cumsum(keep) - 1)[self.doc[occ]].astype(np.uint32)
        token = self.token[occ]
        used = np.zeros(len(self.vocab), dtype=bool)
        used[token] = True
        new_tok = (np.cumsum(used) - 1).astype(np.uint32)
        vocab = [t for t, u in zip(self.vocab, used.tolist(), strict=True) if u]
        return Tokenized(np.asarray(row_ids, np.uint64), self.num_tokens[keep], new_doc, new_tok[token],
                         self.position[occ], vocab)


def tokenize_rows(ds: Dataset, column: str, params: TokenizerParams, row_ids: bool,
                  ranges: tuple[tuple[int, int | None, int | None], ...] | list[Any],
                  only: np.ndarray | None = None) -> Tokenized:
    """Tokenize the rows of ``ranges`` (``only``: exactly the rows of these ids, deleted ones
    included) batch by batch: only the compact u32 token stream and the vocabulary stay, not
    the texts. Documents without tokens are left out (pylance 14 leaves them out of the index
    and its statistics)."""
    id_col = "_rowid" if row_ids else "_rowaddr"
    analyzer = Analyzer(params)
    ids, nts, docs_l, toks_l, pos_l = [], [], [], [], []
    vocab: dict[str, int] = {}
    ndocs = 0

    def scan(r: tuple[int, int | None, int | None]) -> Iterator[pa.RecordBatch]:
        frag_id, start, stop = r
        rr = None if start is None else (start, stop)
        return ds.scan_fragment(frag_id, [column], with_row_id=row_ids, with_row_address=not row_ids,
                                row_range=rr, include_deleted=only is not None)

    batch = FragmentBatch.of(ds, (f for f, _, _ in ranges))
    # object stores: deletion files and small data files in flight together, and the next
    # fragments' columns read while this one is tokenized (as many as the byte budget holds);
    # elsewhere batch by batch
    window = 1 if ds.store.is_local else batch.read_window(ds.store.budget)
    with batch.fetched_ahead(data_max_bytes=WHOLE_FILE_READ):
        pieces = (read_ahead(lambda r: list(scan(r)), ranges, window) if window > 1
                  else (scan(r) for r in ranges))
        for batches in pieces:
            for b in batches:
                col = b.column(column)
                valid = col.is_valid()
                if only is not None:
                    listed = np.isin(b.column(id_col).to_numpy(zero_copy_only=False), only)
                    valid = pc.and_(valid, pa.array(listed))
                tk = analyzer.tokenize(col.filter(valid))
                keep = tk.num_tokens > 0
                new_doc = np.cumsum(keep) - 1
                ids.append(b.column(id_col).filter(valid).to_numpy(zero_copy_only=False)[keep])
                nts.append(tk.num_tokens[keep])
                gid = np.array([vocab.setdefault(t, len(vocab)) for t in tk.vocab], dtype=np.uint32)
                docs_l.append((new_doc[tk.doc] + ndocs).astype(np.uint32))
                toks_l.append(gid[tk.token] if len(gid) else np.empty(0, np.uint32))
                pos_l.append(tk.position)
                ndocs += int(keep.sum())

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)

    return Tokenized(cat(ids, np.uint64), cat(nts, np.uint32), cat(docs_l, np.uint32), cat(toks_l, np.uint32),
                     cat(pos_l, np.uint32), list(vocab))


def write_partition(ds: Dataset, dst: str, part_id: int, tk: Tokenized, with_position: bool,
                    file_version: str) -> list[tuple[str, int]]:
    """``part_<id>_{invert,tokens,docs}.lance`` of a token stream; (name, size) each."""
    docs, tokens, invert = build_partition(tk.row_ids, tk.num_tokens, tk.doc, tk.token, tk.position, tk.vocab,
                                           with_position)
    named = [(invert_file(part_id), invert), (token_file(part_id), tokens), (doc_file(part_id), docs)]
    # object stores: the three uploads in flight together (one round trip, not three in turn)
    sizes = map_concurrently(lambda nt: _write(ds, f"{dst}/{nt[0]}", nt[1], file_version), named,
                             max_workers=1 if ds.store.is_local else len(named))
    return [(name, size) for (name, _), size in zip(named, sizes, strict=True)]


def _listed_rows(ds: Dataset, docs_files: tuple[str, ...], fragments: set[int]) -> np.ndarray:
    """The row addresses an old segment's docs files (any layout: pylance's and ours) list on
    ``fragments``, streamed so only this task's share stays in memory."""
    from lance_spark_ops.file.reader import LanceFileReader

    frags = np.array(sorted(fragments), dtype=np.uint64)
    out = []
    for rel in docs_files:
        for b in LanceFileReader(rel, store=ds.store).iter_batches(["_rowid"]):
            addr = b.column(0).to_numpy(zero_copy_only=False)
            out.append(addr[np.isin(addr >> np.uint64(32), frags)])
    return np.concatenate(out) if out else np.empty(0, np.uint64)


def write_metadata(ds: Dataset, dst: str, part_ids: list[int], params: TokenizerParams, version: str) -> int:
    """``metadata.lance``: no columns; partitions, params and token set format as metadata."""
    schema = metadata_schema(part_ids, json.dumps(params.as_dict(), separators=(",", ":")))
    w = LanceFileWriter(f"{dst}/metadata.lance", schema, version=version, store=ds.store)
    try:
        return w.close()[1]
    except BaseException:
        w.abort()
        raise


def read_segment_metadata(ds: Dataset, seg_dir: str) -> tuple[dict[str, str], str]:
    """``metadata.lance``'s schema metadata (str -> str) of a segment directory, and its path."""
    from lance_spark_ops.file.reader import LanceFileReader

    rel = f"{seg_dir}/metadata.lance"
    meta = LanceFileReader(rel, store=ds.store).schema.metadata or {}
    return ({(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
             for k, v in meta.items()}, ds.store.uri(rel))
