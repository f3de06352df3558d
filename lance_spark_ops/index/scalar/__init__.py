"""Scalar index files (no I/O): BTREE, BITMAP / LABEL_LIST, NGRAM, ZONEMAP, BLOOMFILTER, RTREE,
MINHASHLSH - their formats, builds and remaps."""
