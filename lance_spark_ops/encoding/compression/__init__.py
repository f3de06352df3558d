"""Compression codecs of file versions 2.1 / 2.2, one module per codec (decoder and,
later, encoder together). ``decompress.py`` dispatches on ``CompressiveEncoding``."""
