"""FTS (INVERTED) index tasks: tokenize a run of fragment rows into one index partition
(``part_<id>_{docs,tokens,invert}.lance``) and write ``metadata.lance``.

Each partition task reads at most ``rows`` live rows (whole fragments or row ranges of one),
so its memory is bounded by that, and writes its partition under a partition id the driver
chose: attempts write the same paths with the same bytes, leaving no orphan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.index.fts.layout import doc_file, invert_file, metadata_schema, token_file
from lance_spark_ops.index.fts.postings import build_partition
from lance_spark_ops.index.fts.tokenizer import Analyzer
from lance_spark_ops.spark.runner import TaskContext
from lance_spark_ops.table.dataset import Dataset


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: rows ``start..stop`` (physical offsets; None = whole) of fragments."""

    uri: str
    version: int
    column: str
    params: dict[str, Any]
    row_ids: bool
    dst: str                                   # segment directory relative to the dataset root
    part_id: int
    ranges: tuple[tuple[int, int | None, int | None], ...]
    file_version: str = "2.0"
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # docs files of an old segment: index exactly the rows they list (deleted ones included)
    only_rows_of: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PartitionResult:
    part_id: int
    files: tuple[tuple[str, int], ...]
    docs: int


def _write(ds: Dataset, rel: str, table: pa.Table, version: str) -> int:
    w = LanceFileWriter(rel, table.schema, version=version, store=ds.store)
    try:
        w.write(table)
        return w.close()[1]
    except BaseException:
        w.abort()
        raise


def build_partition_task(spec: PartitionSpec, ctx: TaskContext) -> PartitionResult:
    ds = Dataset.open(spec.uri, version=spec.version, storage_options=spec.storage_options)
    id_col = "_rowid" if spec.row_ids else "_rowaddr"
    only = None
    if spec.only_rows_of is not None:
        only = _listed_rows(ds, spec.only_rows_of, {f for f, _, _ in spec.ranges})
    analyzer = Analyzer(spec.params)
    # tokenized batch by batch: only the compact token stream (u32 doc, token, position) and
    # the partition's vocabulary stay, not the texts
    ids, nts, docs_l, toks_l, pos_l = [], [], [], [], []
    vocab: dict[str, int] = {}
    ndocs = 0
    for frag_id, start, stop in spec.ranges:
        rr = None if start is None else (start, stop)
        for b in ds.scan_fragment(frag_id, [spec.column], with_row_id=spec.row_ids,
                                  with_row_address=not spec.row_ids, row_range=rr,
                                  include_deleted=only is not None):
            col = b.column(spec.column)
            valid = col.is_valid()
            if only is not None:
                listed = np.isin(b.column(id_col).to_numpy(zero_copy_only=False), only)
                valid = pc.and_(valid, pa.array(listed))
            tk = analyzer.tokenize(col.filter(valid))
            # pylance 14 leaves documents without tokens out of the index (and its statistics)
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

    row_ids = cat(ids, np.uint64)
    docs, tokens, invert = build_partition(row_ids, cat(nts, np.uint32), cat(docs_l, np.uint32),
                                           cat(toks_l, np.uint32), cat(pos_l, np.uint32), list(vocab),
                                           spec.params["with_position"])
    files = []
    for name, table in ((invert_file(spec.part_id), invert), (token_file(spec.part_id), tokens),
                        (doc_file(spec.part_id), docs)):
        files.append((name, _write(ds, f"{spec.dst}/{name}", table, spec.file_version)))
    return PartitionResult(spec.part_id, tuple(files), len(row_ids))


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


def write_metadata(ds: Dataset, dst: str, part_ids: list[int], params: dict[str, Any], version: str) -> int:
    """``metadata.lance``: no columns; partitions, params and token set format as metadata."""
    schema = metadata_schema(part_ids, json.dumps(params, separators=(",", ":")))
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
