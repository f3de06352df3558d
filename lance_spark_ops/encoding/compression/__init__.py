"""Compression codecs of file versions 2.1 / 2.2, one module per codec (decoder and encoder
together). ``registry.py`` maps each ``CompressiveEncoding`` case to them for reader and writer."""
