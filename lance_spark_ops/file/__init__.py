"""Lance data files: the container (footer, column metadata, global buffers), the schema,
and the reader / writer built on the encodings."""
