"""Legacy (file format 0.1, "v1") page encodings: plain, var-binary, dictionary, and the
list / struct / null layouts built from them. Fenced off like ``encoding/v2_0``."""

from lance_spark_ops.encoding.v0_1.decode import PageSource, decode_field

__all__ = ["PageSource", "decode_field"]
