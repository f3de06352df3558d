"""The codecs' size thresholds as one frozen value (issue #38): when the compiled (numba) kernels
take an input, when a kernel runs as two halves on two threads, when the FSST decoder sizes its
output in a first pass, when bit-packing packs per width. The defaults are today's constants
(and their environment switches, read once at import).

A codec function that tests call directly takes ``tuning=`` (None: the process's value). The
process's value - what the reader and writer paths meet - is set through ``configure_codecs`` /
``codecs_tuned`` only (the one declared seam, as ``cache.configure_cache`` is for the cache
budget): tests set a value there instead of patching module globals."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["DEFAULT_CODEC_TUNING", "CodecTuning", "codec_tuning", "codecs_tuned", "configure_codecs"]


@dataclass(frozen=True)
class CodecTuning:
    """Size thresholds of the codecs (bytes of input unless said otherwise)."""

    # an input this big loads the compiled kernels (``compression.compiled``) ...
    compiled_min_bytes: int = int(os.environ.get("LSO_COMPILED_MIN_BYTES", 1 << 20))
    # ... which, once loaded, take every input from this size
    compiled_loaded_min_bytes: int = 4096
    # a big input runs as two halves on two threads (``compression.kernel_threads``;
    # ``LSO_KERNEL_THREADS=1`` keeps every kernel on its caller's thread) from this size
    split_threads: bool = os.environ.get("LSO_KERNEL_THREADS", "2") != "1"
    split_min_bytes: int = 1 << 20
    # the compiled FSST decoder writes into an 8x bound up to this size, above it sizes the output
    # exactly in a first pass
    fsst_one_pass_max_bytes: int = 256 << 20
    # runs of equal chunk widths above which inline bit-packing packs per width (a count)
    bitpack_max_runs: int = 64


DEFAULT_CODEC_TUNING = CodecTuning()
_current = [DEFAULT_CODEC_TUNING]


def codec_tuning(tuning: CodecTuning | None = None) -> CodecTuning:
    """``tuning`` when given, else the process's value."""
    return _current[0] if tuning is None else tuning


def configure_codecs(tuning: CodecTuning | None) -> CodecTuning:
    """Set the process's value (None: the defaults); returns the one it replaces."""
    previous, _current[0] = _current[0], tuning or DEFAULT_CODEC_TUNING
    return previous


@contextmanager
def codecs_tuned(tuning: CodecTuning) -> Iterator[CodecTuning]:
    """The process's value is ``tuning`` inside the block, the previous one after it."""
    previous = configure_codecs(tuning)
    try:
        yield tuning
    finally:
        configure_codecs(previous)
