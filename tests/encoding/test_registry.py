"""The codec registry covers every ``CompressiveEncoding`` case of the protobuf files: each
oneof field resolves to callables or to a typed ``UnsupportedError`` naming the encoding -
never a ModuleNotFoundError / KeyError. Walking the descriptors means a case added to the
.proto files is checked without editing this test."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable

import numpy as np
import pytest

import lance_spark_ops._pb as pb_pkg
from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression.registry import (
    CODECS,
    DECODE_CONTEXTS,
    ENCODE_CONTEXTS,
    PER_CHUNK_CODECS,
    TABLE,
    CodecRegistry,
    decompress_block,
    decompress_miniblock_chunks,
    decompress_per_value,
)
from lance_spark_ops.errors import CorruptFileError, LanceError, UnsupportedError


def _compressive_messages() -> list:
    """Every message type named CompressiveEncoding in any module of ``lance_spark_ops._pb``."""
    found = []
    for mod in pkgutil.iter_modules(pb_pkg.__path__):
        module = importlib.import_module(f"{pb_pkg.__name__}.{mod.name}")
        stack = list(module.DESCRIPTOR.message_types_by_name.values())
        while stack:
            desc = stack.pop()
            stack.extend(desc.nested_types)
            if desc.name == "CompressiveEncoding":
                found.append(desc)
    return found


MESSAGES = _compressive_messages()
CASES = [(d.full_name, f.name) for d in MESSAGES for o in d.oneofs for f in o.fields]


def test_the_walk_finds_the_cases() -> None:
    assert MESSAGES, "no CompressiveEncoding message in lance_spark_ops._pb"
    names = {case for _, case in CASES}
    assert {"flat", "variable", "general", "fsst", "dictionary", "packed_struct"} <= names


@pytest.mark.parametrize("message,case", CASES)
@pytest.mark.parametrize("context", DECODE_CONTEXTS + ENCODE_CONTEXTS, ids=lambda c: c.__name__)
def test_every_case_resolves_or_is_typed_unsupported(message: str, case: str, context: Callable) -> None:
    try:
        fn = context(CODECS, case)
    except UnsupportedError as e:
        assert case in str(e)
        return
    assert callable(fn)


@pytest.mark.parametrize("message,case", CASES)
def test_decoding_an_empty_case_raises_typed_errors(message: str, case: str) -> None:
    """Each public decode entry point, on the case with an empty message, returns a block or
    raises a LanceError subclass (an empty message is corrupt or unsupported)."""
    enc = pb.CompressiveEncoding()
    getattr(enc, case).SetInParent()
    one_value = VariableWidthBlock(np.array([0, 1], np.uint32), np.zeros(1, np.uint8), 1)
    calls = [
        lambda: decompress_block(enc, memoryview(b"\0" * 16), 2),
        lambda: decompress_miniblock_chunks(enc, [[memoryview(b"\0" * 16)]], np.array([2])),
        lambda: decompress_per_value(enc, one_value),
        lambda: CODECS.decode_miniblock_ranges(enc, np.zeros(16, np.uint8), np.zeros((1, 1), np.int64),
                                               np.full((1, 1), 16, np.int64), np.array([2])),
    ]
    for call in calls:
        try:
            call()
        except LanceError:
            pass


def test_dictionary_is_unsupported_by_name() -> None:
    enc = pb.CompressiveEncoding(dictionary=pb.Dictionary())
    for call in (
        lambda: decompress_block(enc, memoryview(b""), 0),
        lambda: decompress_miniblock_chunks(enc, [], np.zeros(0, np.int64)),
        lambda: decompress_per_value(enc, FixedWidthBlock(np.zeros(0, np.uint8), 8, 0)),
    ):
        with pytest.raises(UnsupportedError, match="dictionary"):
            call()


def test_empty_encoding_is_corrupt() -> None:
    with pytest.raises(CorruptFileError, match="empty"):
        decompress_block(pb.CompressiveEncoding(), memoryview(b""), 0)


def test_per_chunk_registry_never_takes_the_ranges_paths() -> None:
    """``PER_CHUNK_CODECS`` (the other half of the parametrized mini-block tests) really
    decodes chunk by chunk: a registry like it never calls a ``*_ranges`` function."""
    called = []

    def spy(*args: object) -> None:
        called.append(args)
        raise AssertionError("ranges path taken")

    table = {k: dataclasses.replace(v, miniblock_ranges=spy if v.miniblock_ranges else None,
                                    blocks_ranges=spy if v.blocks_ranges else None) for k, v in TABLE.items()}
    reg = CodecRegistry(table, use_ranges=PER_CHUNK_CODECS.use_ranges)
    enc = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=16))
    data = np.arange(8, dtype="<u2").view(np.uint8)
    starts, sizes = np.array([[0], [8]]), np.array([[8], [8]])
    got = reg.decode_miniblock_ranges(enc, data, starts, sizes, np.array([4, 4]))
    assert np.asarray(got.data).view("<u2").tolist() == list(range(8))
    blocks = reg.decode_blocks_ranges(enc, data, starts[:, 0], sizes[:, 0], np.array([4, 4]))
    assert [np.asarray(b.data).view("<u2").tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert not called
    fast = CodecRegistry(table)
    with pytest.raises(AssertionError, match="ranges path taken"):
        fast.decode_miniblock_ranges(enc, data, starts, sizes, np.array([4, 4]))
