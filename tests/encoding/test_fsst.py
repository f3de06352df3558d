"""FSST decoding: property tests against a sequential reference decoder (random symbol tables
and code streams, escapes and 0xFF literals included), and strings written by pylance
(mini-block Fsst(Variable), Variable)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops.encoding.compression.fsst import (
    FSST_MAGIC,
    SYMBOL_TABLE_SIZE,
    fsst_decompress,
    parse_symbol_table,
)
from lance_spark_ops.errors import CorruptFileError
from tests.encoding._fz import Written, meta_table

pytestmark = pytest.mark.usefixtures("fsst_path")  # numpy and compiled FSST alike


def table_bytes(symbols: list[bytes], enabled: bool = True) -> bytes:
    n = len(symbols)
    header = (FSST_MAGIC << 32) | (int(enabled) << 24) | n
    out = header.to_bytes(8, "little")
    out += b"".join(s.ljust(8, b"\0") for s in symbols)
    out += bytes(len(s) for s in symbols)
    return out.ljust(SYMBOL_TABLE_SIZE, b"\0")


def reference(symbols: list[bytes], data: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(data):
        if data[i] == 255:
            out.append(data[i + 1])
            i += 2
        else:
            out += symbols[data[i]]
            i += 1
    return bytes(out)


@st.composite
def streams(draw):
    symbols = draw(st.lists(st.binary(min_size=1, max_size=8), min_size=0, max_size=255))
    token = (
        st.one_of(
            st.tuples(st.just("lit"), st.one_of(st.just(255), st.integers(0, 255))),
            st.tuples(st.just("code"), st.integers(0, max(len(symbols) - 1, 0))),
        )
        if symbols
        else st.tuples(st.just("lit"), st.one_of(st.just(255), st.integers(0, 255)))
    )
    strings = draw(st.lists(st.lists(token, max_size=12), min_size=1, max_size=20))
    encoded = []
    for toks in strings:
        b = bytearray()
        for kind, v in toks:
            b += bytes([255, v]) if kind == "lit" else bytes([v])
        encoded.append(bytes(b))
    return symbols, encoded


@settings(max_examples=300, deadline=None)
@given(streams(), st.sampled_from([np.uint32, np.uint64]), st.integers(0, 5))
def test_fsst_matches_reference(stream, dtype, lead: int) -> None:
    symbols, encoded = stream
    table = parse_symbol_table(table_bytes(symbols))
    data = np.frombuffer(b"\x07" * lead + b"".join(encoded) + b"\x09", np.uint8)
    offsets = (lead + np.concatenate(([0], np.cumsum([len(e) for e in encoded])))).astype(dtype)
    out, offs = fsst_decompress(table, data, offsets)
    assert offs.dtype == dtype and offs[0] == 0
    got = [out[offs[i] : offs[i + 1]].tobytes() for i in range(len(encoded))]
    assert got == [reference(symbols, e) for e in encoded]


def test_fsst_switched_off_is_identity() -> None:
    table = parse_symbol_table(table_bytes([b"ab"], enabled=False))
    data = np.frombuffer(b"xyz\xff", np.uint8)
    out, offs = fsst_decompress(table, data, np.array([0, 2, 4], np.uint32))
    assert out.tobytes() == b"xyz\xff" and offs.tolist() == [0, 2, 4]


def test_fsst_corrupt_inputs() -> None:
    table = parse_symbol_table(table_bytes([b"ab", b"c"]))
    with pytest.raises(CorruptFileError, match="escape"):  # string ends inside an escape
        fsst_decompress(table, np.frombuffer(b"\x00\xff\x00", np.uint8), np.array([0, 2, 3], np.uint32))
    with pytest.raises(CorruptFileError, match="code 7"):
        fsst_decompress(table, np.frombuffer(b"\x00\x07", np.uint8), np.array([0, 2], np.uint32))
    with pytest.raises(CorruptFileError):
        fsst_decompress(table, np.frombuffer(b"\x00\x01", np.uint8), np.array([0, 3], np.uint32))
    with pytest.raises(CorruptFileError):
        parse_symbol_table(b"\0" * 16)
    with pytest.raises(CorruptFileError):
        parse_symbol_table(table_bytes([b"ab"])[:12])
    bad_len = bytearray(table_bytes([b"ab"]))
    bad_len[16] = 9
    with pytest.raises(CorruptFileError):
        parse_symbol_table(bytes(bad_len))


WORDS = ["lance", "spark", "column", "page", "mini", "block", "zip", "row", "\u00e9t\u00e9", "data", "\u2603"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31),
    width=st.integers(16, 40),
    nulls=st.booleans(),
    version=st.sampled_from(["2.1", "2.2"]),
    large=st.booleans(),
)
def test_pylance_text_miniblock_fsst(
    tmp_path, seed: int, width: int, nulls: bool, version: str, large: bool
) -> None:
    rng = np.random.default_rng(seed)
    n = 3000  # ~20 B strings: enough bytes (>= 32 KiB) for FSST, too many distinct for a dictionary
    words = rng.choice(WORDS, size=(n, 8))
    vals = [(" ".join(w) * 3)[: rng.integers(width // 2, width)] for w in words]
    arr = pa.array(
        [None if nulls and i % 11 == 0 else v for i, v in enumerate(vals)],
        pa.large_string() if large else pa.string(),
    )
    w = Written.of(tmp_path, pa.table({"a": arr}), version, f"t{seed}")
    found = w.encodings(0)
    assert {"mini_block_layout", "fsst", "variable"} <= found, found
    w.check()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_binary_miniblock_variable(tmp_path, version: str) -> None:
    rng = np.random.default_rng(1)
    vals = [rng.integers(0, 256, rng.integers(0, 40), dtype=np.uint8).tobytes() for _ in range(3000)]
    w = Written.of(tmp_path, pa.table({"a": pa.array(vals, pa.binary())}), version)
    found = w.encodings(0)
    assert "variable" in found and "fsst" not in found, found
    w.check()
    w = Written.of(
        tmp_path, meta_table(pa.array([v.hex() for v in vals]), compression="none"), version, "none"
    )
    assert "fsst" not in w.encodings(0)
    w.check()
