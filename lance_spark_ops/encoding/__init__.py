"""Lance encodings: bytes <-> data blocks <-> Arrow arrays. No I/O happens in this package."""
