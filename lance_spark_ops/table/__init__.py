"""Table format: manifests, fragments, deletion files, row ids, and scanning datasets."""
