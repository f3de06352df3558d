"""Lance index files and their remapping after compaction (issue #11).

What pylance 14.0.2 was seen to do (``tests/index`` builds these cases; 2.0 / 2.1 / 2.2 alike):

Index entries (``IndexSection.indices``, ``IndexMetadata``): ``files`` lists every file of the
index directory ``_indices/<uuid>/`` with its size; ``created_at`` is in milliseconds;
``index_version`` is BTREE 0 (1 on stable-row-id datasets), BITMAP 0, LABEL_LIST 1, INVERTED 2,
NGRAM 0, ZONEMAP 0, BLOOMFILTER 0, IVF_* 1. Files per type: BTREE ``page_data.lance`` (values,
ids: uint64 not null, sorted by value) + ``page_lookup.lance`` (min, max, null_count, page_idx;
schema metadata ``batch_size`` = 4096, ``range_partitioned``); BITMAP / LABEL_LIST
``bitmap_page_lookup.lance``; INVERTED ``metadata.lance`` +
``part_0_{docs,invert,tokens}.lance``; IVF_* ``index.idx`` + ``auxiliary.idx`` (``ivf``;
IVF_HNSW_* graphs: ``hnsw_file``). Indices keep deleted rows until remapped. Index ``.lance``
files have the dataset's file version (2.0 datasets: 2.0 index files). BITMAP / LABEL_LIST
bitmaps are Lance ``RowIdTreeMap``s (``index.scalar.bitmap``); LABEL_LIST keeps the rows with a null
list in global buffer 1 (``lance:label_list_nulls``). ``VectorIndexDetails`` (empty in the
late-2025 protos) set field 3 for HNSW, 4 PQ, 5 SQ, 8 FLAT (``kinds``). IVF storage layout:
``index.vector.ivf``.

Compaction without stable row ids, ``defer_index_remap=False``: every index but ZONEMAP and
BLOOMFILTER is rewritten under a new uuid (``_indices/<new uuid>/``; the old directory stays
until cleanup); the Rewrite transaction lists each in ``rewritten_indices`` (old_id, new_id,
new_index_details, new_index_version, and field 5 ``new_index_files`` = path + size, absent
from the late-2025 protos); the manifest entry gets the new uuid / details / version / files,
keeps ``dataset_version`` and ``name``, and its fragment bitmap has each group's old ids
replaced by the new ones. IVF_* storage drops deleted rows and rewrites addresses, keeping the
order per partition (IVF_SQ / IVF_PQ / IVF_FLAT / IVF_RQ copy ``index.idx``; IVF_RQ packs each
partition's codes again); IVF_HNSW_* rebuild each
partition's graph on the remapped storage with the old build parameters (Lance's
``HNSW::remap``; the graph is randomised, so only its layout, not its edges, matches
pylance's), and re-serialise the SQ ``bounds`` as serde_json does (``serde_float``). ZONEMAP /
BLOOMFILTER entries are left as they were, naming the removed fragments: the new fragments are
unindexed for them (``index_stats``: 0 indexed rows). A remapped BTREE drops deleted rows,
rewrites ids to new addresses and copies ``page_lookup``.

``defer_index_remap=True``: no index file and no index entry changes. The fragment reuse index
(``__lance_frag_reuse``, no fields, ``index_version`` 0 explicitly set, no ``files``) is
added, or replaced by one with a new uuid holding the previous versions plus one more:
``FragmentReuseIndexDetails.inline.versions[]`` = (dataset_version = the version after the
fragment-id reservation, groups[] = (changed_row_addrs = portable RoaringTreemap of the old
row addresses read, i.e. the live rows; old / new FragmentDigest id, physical_rows,
num_deleted_rows)). Its ``dataset_version`` is the same version; its fragment bitmap holds
this compaction's new fragments only. Over 204800 bytes the details go to
``_indices/<uuid>/details.binpb`` (``external``: path, offset 0, size). The Rewrite
transaction carries no trace of it. pylance remaps each index's fragment bitmap through every
FRI version when it loads indices (a group partly covered is an error) and each index's row
addresses when it opens the index, so ``index_stats`` reports 0 unindexed rows. pylance's later
commits (e.g. a Delete) write those FRI-remapped bitmaps back into the manifest while the index
data stay behind, so a stored bitmap does not tell whether an index was remapped; pylance's
trim rule (``frag_reuse.caught_up``) uses the index's ``dataset_version``. IVF_HNSW_* indices
cannot be read through the FRI once the rewritten fragments had deleted rows ("HNSW graph has N
nodes but its vector storage has M rows", pylance's own deferred compaction included), so this
library rebuilds such an index in the deferred compaction's own commit (new uuid, listed in
``rewritten_indices``) while the other indices go behind the FRI (its entry keeps its
``dataset_version``, as a Rewrite does, so ``remap_indices`` later rewrites it once more,
dropping no row, so every partition keeps its graph, before trimming the version); IVF_SQ,
IVF_PQ, IVF_FLAT, IVF_RQ,
INVERTED, NGRAM, BTREE, BITMAP and LABEL_LIST can be read through it. pylance 14's own
default compaction of a dataset whose indices are behind an FRI (its own or ours) answers
equality / range / full-text / vector queries wrongly afterwards (for every index still behind
the FRI: ``remap_indices`` first fixes it for the types it rewrites, not INVERTED / NGRAM).

Stable row ids: the Rewrite keeps every index's uuid and replaces each group's old fragment
ids by its new ones in the bitmap, except indices holding row addresses: BTREE at
``index_version`` 1 is rewritten (listed in ``rewritten_indices``), ZONEMAP and BLOOMFILTER
lose the rewritten fragments (bitmap emptied of them). ``defer_index_remap`` is refused
("Not supported: Cannot compact with defer_index_remap: the dataset uses stable row IDs").

Modules: ``kinds`` (what an index entry is), ``frag_reuse`` (the FRI: details, versions,
bitmaps, address maps), ``address_map`` (old -> new row addresses of a rewrite), ``actions``
(what a compaction does to each index), ``btree`` / ``bitmap`` / ``ivf`` (file remaps;
``btree`` / ``bitmap`` also build), ``ngram`` / ``zoned`` / ``zonemap`` / ``bloomfilter`` /
``rtree`` / ``minhash``
(formats of the other scalar kinds, issue #27),
``hnsw`` (graph build), ``hnsw_file`` (its ``index.idx``), ``vector_space`` (the vectors a
graph is built on, from the storage), ``serde_float`` (JSON floats as Lance's Rust reads and
writes them); vector builds (#28): ``kmeans`` (balanced k-means in rounds), ``quantizers``
(PQ / SQ training and codes), ``ivf_model`` (a trained model and what it does to vectors),
``ivf_build`` (the new segment's files, schemas and details); ``fts`` (INVERTED: tokenizer,
postings, layout). The Spark side: ``spark.indices.index_remap`` (driver), ``spark.indices.index_remap_tasks``
(executors); builds: ``spark.indices.indexing`` (driver of create_index / optimize_indices),
``spark.indices.scalar_index`` / ``spark.indices.fts_index`` /
``spark.indices.vector_index`` and their tasks."""
