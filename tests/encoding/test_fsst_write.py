"""FSST encoder: the vectorised parse equals FSST's byte-at-a-time compressor rule, output
round-trips through our decoder and through pylance (mini-block and full-zip pages), the
symbol table is laid out as Lance exports it, and sizes stay within 5% of pylance's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import VariableWidthBlock
from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block
from lance_spark_ops.encoding.compression import fsst_encode
from lance_spark_ops.encoding.compression.fsst import (
    FSST_MAGIC,
    SYMBOL_TABLE_SIZE,
    encode_fsst_miniblock,
    encode_fsst_per_value,
    finalize_order,
    fsst_compress,
    fsst_decompress,
    parse_symbol_table,
    serialize_symbol_table,
)
from lance_spark_ops.encoding.layout.miniblock_encode import encode_miniblock_page
from lance_spark_ops.encoding.tuning import CodecTuning
from lance_spark_ops.errors import InvalidInputError
from tests.encoding._fresh import run_fresh
from tests.encoding._fz import oneofs
from tests.encoding._write import fullzip_page, roundtrip, size_ratio, text

# the codec tuning that keeps FSST on the numpy code (the compiled kernels take no input)
NUMPY = CodecTuning(compiled_min_bytes=1 << 62, compiled_loaded_min_bytes=1 << 62)

pytestmark = pytest.mark.usefixtures("fsst_path")  # numpy and compiled FSST alike


def _vals(symbols: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    vals = np.array([int.from_bytes(s, "little") for s in symbols], np.uint64)
    return vals, np.array([len(s) for s in symbols], np.uint8)


def test_symbol_table_layout() -> None:
    """Codes as FSST's finalize numbers them; 2312 bytes; header fields."""
    vals, lens = _vals([b"ab", b"abc", b"x", b"cd", b"hello"])
    order, suffix_lim = finalize_order(vals, lens)
    assert order.tolist() == [0, 3, 1, 4, 2] and suffix_lim == 1  # ab (has suffix), cd, abc, hello, x
    raw = serialize_symbol_table(vals, lens, terminator=7)
    assert len(raw) == SYMBOL_TABLE_SIZE
    header = int.from_bytes(raw[:8], "little")
    assert header == (FSST_MAGIC << 32) | (1 << 24) | (1 << 16) | (7 << 8) | 5
    table = parse_symbol_table(raw)
    assert [table.symbols[i, : table.lens[i]].tobytes() for i in range(5)] == [
        b"ab",
        b"cd",
        b"abc",
        b"hello",
        b"x",
    ]
    assert raw[8 + 9 * 5 :] == bytes(SYMBOL_TABLE_SIZE - 8 - 9 * 5)
    # the module docstring's example
    assert serialize_symbol_table(*_vals([b"ab"]))[:17] == bytes.fromhex("0100000154535346616200000000000002")


def reference_compress(table: fsst_encode.Table, data: bytes, offsets: list[int]) -> tuple[bytes, list[int]]:
    """FSST's compressor rule one byte position at a time (511-byte pieces)."""
    syms = {i: int(table.vals[i]).to_bytes(8, "little")[: int(table.lens[i])] for i in range(table.n)}
    by_slot = {}
    for i, s in syms.items():
        if len(s) >= 3:
            by_slot[int(fsst_encode._slot(np.array([int(table.vals[i])], np.uint64))[0])] = i
    two = {s: i for i, s in syms.items() if len(s) == 2}
    one = {s: i for i, s in syms.items() if len(s) == 1}
    out, new_offsets = bytearray(), [0]
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        for p0 in range(a, b, fsst_encode.PIECE):
            end, p = min(p0 + fsst_encode.PIECE, b), p0
            while p < end:
                word = int.from_bytes(data[p : p + 8].ljust(8, b"\0"), "little")
                i = by_slot.get(int(fsst_encode._slot(np.array([word], np.uint64))[0]))
                if i is not None and len(syms[i]) <= end - p and data[p : p + len(syms[i])] == syms[i]:
                    out.append(i)
                    p += len(syms[i])
                elif end - p >= 2 and data[p : p + 2] in two:
                    out.append(two[data[p : p + 2]])
                    p += 2
                elif data[p : p + 1] in one:
                    out.append(one[data[p : p + 1]])
                    p += 1
                else:
                    out += bytes([255, data[p]])
                    p += 1
        new_offsets.append(len(out))
    return bytes(out), new_offsets


WORDS = ["lance", "spark", "column", "page", "zip", "\u00e9t\u00e9", "\u2603", "a", "the ", "\xff"]


@st.composite
def string_sets(draw):
    kind = draw(st.sampled_from(["words", "binary", "long"]))
    n = draw(st.integers(1, 60))
    if kind == "words":
        vals = [" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=8))).encode() for _ in range(n)]
    elif kind == "binary":
        vals = draw(st.lists(st.binary(max_size=40), min_size=n, max_size=n))
    else:
        vals = [draw(st.sampled_from(WORDS)).encode() * draw(st.integers(0, 300)) for _ in range(n)]
    return vals


def _arrays(vals: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate(([0], np.cumsum([len(v) for v in vals]))).astype(np.int64)
    return np.frombuffer(b"".join(vals) or b"", np.uint8), offsets


@settings(max_examples=40, deadline=None)
@given(vals=string_sets())
def test_vectorised_parse_equals_reference(vals: list[bytes]) -> None:
    data, offsets = _arrays(vals)
    table, _ = fsst_encode.build_table(data, offsets)
    order, _ = finalize_order(table.vals, table.lens)
    final = fsst_encode.Table(table.vals[order], table.lens[order])
    out, new_offsets = fsst_encode.compress(final, data, offsets)
    want, want_offsets = reference_compress(final, data.tobytes(), offsets.tolist())
    assert out.tobytes() == want and new_offsets.tolist() == want_offsets


def test_repeated_strings_compress_once_and_equal_reference() -> None:
    """A page of many repeats parses only its distinct strings; the bytes are those of the
    reference parse of every string."""
    rng = np.random.default_rng(4)
    base = [" ".join(rng.choice(WORDS, 3)).encode() + b"\xff" * int(rng.integers(0, 2)) for _ in range(300)]
    vals = [base[i] for i in rng.integers(0, len(base), 4 * fsst_encode.REPEAT_SAMPLE + 100)]
    data, offsets = _arrays(vals)
    table, _ = fsst_encode.build_table(data, offsets)
    order, _ = finalize_order(table.vals, table.lens)
    final = fsst_encode.Table(table.vals[order], table.lens[order])
    assert fsst_encode._distinct(data, offsets) is not None  # the distinct-strings path is taken
    out, new_offsets = fsst_encode.compress(final, data, offsets)
    want, want_offsets = reference_compress(final, data.tobytes(), offsets.tolist())
    assert out.tobytes() == want and new_offsets.tolist() == want_offsets


@settings(max_examples=60, deadline=None)
@given(vals=string_sets(), repeat=st.integers(1, 700), large=st.booleans())
def test_fsst_roundtrip_through_our_decoder(vals: list[bytes], repeat: int, large: bool) -> None:
    size = max(1, sum(len(v) for v in vals))
    data, offsets = _arrays(vals * min(repeat, max(1, 120_000 // size)))  # cross 32 KiB sometimes
    offsets = offsets.astype(np.uint64 if large else np.uint32)
    raw, out, new_offsets = fsst_compress(data, offsets)
    table = parse_symbol_table(raw)
    assert table.enabled == (data.size >= 32 * 1024)
    got, got_offsets = fsst_decompress(table, out, new_offsets.astype(offsets.dtype))
    assert got.tobytes() == data.tobytes() and got_offsets.tolist() == offsets.tolist()


def test_small_input_is_stored_as_is() -> None:
    data, offsets = _arrays([b"hello", b"", b"world"])
    raw, out, new_offsets = fsst_compress(data, offsets)
    assert raw == (FSST_MAGIC << 32).to_bytes(8, "little") + bytes(SYMBOL_TABLE_SIZE - 8)
    assert out.tobytes() == b"helloworld" and new_offsets.tolist() == [0, 5, 5, 10]


def test_fsst_encoders_refuse_fixed_width() -> None:
    from lance_spark_ops.encoding.blocks import FixedWidthBlock

    with pytest.raises(InvalidInputError):
        encode_fsst_miniblock(FixedWidthBlock(np.zeros(8, np.uint8), 32, 2))


def _miniblock_page(arr: pa.Array, version: str):
    mc = encode_fsst_miniblock(arrow_to_block(arr))
    return encode_miniblock_page(len(arr), mc, None, None, [pb.REPDEF_ALL_VALID_ITEM], version)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_miniblock_fsst_read_by_pylance_and_size(tmp_path, version: str, typ: pa.DataType) -> None:
    arr = pa.array(text(50_000, 20, 1), typ)
    table = pa.table({"v": arr})
    page = _miniblock_page(arr, version)
    assert {"mini_block_layout", "fsst", "variable"} <= set(oneofs(page.encoding))
    path, _, _ = roundtrip(tmp_path, table, [[page]], version)
    assert size_ratio(tmp_path, table, path, version) <= 1.05


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_fullzip_fsst_read_by_pylance_and_size(tmp_path, version: str) -> None:
    arr = pa.array([None if i % 9 == 0 else s for i, s in enumerate(text(2000, 500, 2))])
    table = pa.table({"v": arr})
    page = fullzip_page(arr, encode_fsst_per_value, version)
    assert {"full_zip_layout", "fsst"} <= set(oneofs(page.encoding))
    path, _, _ = roundtrip(tmp_path, table, [[page]], version)
    assert size_ratio(tmp_path, table, path, version) <= 1.05


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vals=string_sets(), repeat=st.integers(1, 400), version=st.sampled_from(["2.1", "2.2"]))
def test_fsst_pages_read_by_pylance(tmp_path, vals: list[bytes], repeat: int, version: str) -> None:
    size = max(1, sum(len(v) for v in vals))
    arr = pa.array(vals * min(repeat, max(1, 120_000 // size)), pa.binary())
    page = _miniblock_page(arr, version)
    roundtrip(tmp_path, pa.table({"v": arr}), [[page]], version, name=f"p{len(arr)}_{repeat}")


def test_per_value_keeps_offset_width() -> None:
    data, offsets = _arrays([b"lance spark " * 20] * 400)
    block = VariableWidthBlock(offsets.astype(np.uint64), data, 400)
    values, enc = encode_fsst_per_value(block)
    assert np.asarray(values.offsets).dtype == np.uint64
    assert enc.fsst.values.variable.offsets.flat.bits_per_value == 64
    assert len(enc.fsst.symbol_table) == SYMBOL_TABLE_SIZE


@pytest.mark.parametrize("n_symbols", [3, 254, 255])
def test_decoder_escape_paths(n_symbols: int) -> None:
    """Escapes decode the same whether a code is free (literal patched in after the take)
    or all 255 codes are symbols (escape + literal folded into one token)."""
    rng = np.random.default_rng(n_symbols)
    symbols = [bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8)) for _ in range(n_symbols)]
    table = parse_symbol_table(serialize_symbol_table(*_vals(symbols)))
    order, _ = finalize_order(*_vals(symbols))
    by_code = [symbols[i] for i in order]
    strings, encoded = [], []
    for _ in range(300):
        raw, plain = bytearray(), bytearray()
        for _ in range(int(rng.integers(0, 12))):
            if rng.random() < 0.3:
                b = int(rng.choice([255, int(rng.integers(0, 256))]))
                raw += bytes([255, b])
                plain.append(b)
            else:
                c = int(rng.integers(0, n_symbols))
                raw.append(c)
                plain += by_code[c]
        encoded.append(bytes(raw))
        strings.append(bytes(plain))
    data, offsets = _arrays(encoded)
    out, new_offsets = fsst_decompress(table, data, offsets.astype(np.uint32))
    got = [out[new_offsets[i] : new_offsets[i + 1]].tobytes() for i in range(len(strings))]
    assert got == strings


@pytest.mark.parametrize("kind", ["text", "hex", "long", "binary", "empty_runs"])
def test_compiled_parse_equals_numpy_on_large_pages(kind: str) -> None:
    """Pages of a few MB, as compaction writes them: the numba parse gives the numpy
    parse's bytes (and so the reference rule's), whatever the lane split of the strings,
    and the numba expansion gives the strings back."""
    from lance_spark_ops.encoding.compression import fsst_kernels

    rng = np.random.default_rng(len(kind))
    n = 60_000
    if kind == "text":
        vals = [" ".join(rng.choice(WORDS, int(rng.integers(1, 9)))).encode() for _ in range(n)]
    elif kind == "hex":
        vals = [rng.bytes(16).hex().encode() for _ in range(n)]
    elif kind == "long":  # pieces of 511 bytes, tails of every length
        vals = [str(rng.choice(WORDS)).encode() * int(rng.integers(0, 400)) for _ in range(n // 20)]
    elif kind == "binary":  # escapes everywhere
        vals = [rng.bytes(int(rng.integers(0, 40))) for _ in range(n)]
    else:  # runs of empty strings, also at both ends and at lane boundaries
        vals = [b"" if (i // 7) % 3 else str(rng.choice(WORDS)).encode() for i in range(n)]
    lead = b"\x01\x02\x03"  # offsets that do not start at 0
    data = np.frombuffer(lead + b"".join(vals), np.uint8)
    offsets = len(lead) + np.concatenate(([0], np.cumsum([len(v) for v in vals]))).astype(np.int64)
    chosen, _ = fsst_encode.build_table(data, offsets)
    table = parse_symbol_table(serialize_symbol_table(chosen.vals, chosen.lens))
    order, _ = finalize_order(chosen.vals, chosen.lens)
    t = fsst_encode.Table(chosen.vals[order], chosen.lens[order])
    want, want_offsets = fsst_encode._compress_all(t, data, offsets, NUMPY)
    short, single, ht = t.packed()
    got, got_offsets = fsst_kernels.compress(data, offsets, fsst_encode.PIECE, short, single, t.ht_val,
                                             t.ht_mask, ht)
    assert np.array_equal(got, want) and np.array_equal(got_offsets, want_offsets)
    lo, hi = got_offsets[:-1], got_offsets[1:]
    size, err, _ = fsst_kernels.expanded_size(got, lo, hi, table.lens, table.n_symbols)
    assert err == 0 and size == data.size - len(lead)
    for capacity in (8 * got.size, size):  # the bound of one pass, the exact size of two
        plain, plain_offsets, err, _ = fsst_kernels.decompress(got, lo, hi, table.symbols64, table.lens,
                                                               table.n_symbols, capacity)
        assert err == 0 and plain.tobytes() == data[len(lead):].tobytes()
        assert np.array_equal(plain_offsets, offsets - len(lead))


def test_without_numba_the_numpy_code_does_the_work() -> None:
    """numba missing (or unusable) on a worker: the kernels are not used, with a warning,
    and a page above the threshold still compresses and decompresses."""
    script = (
        "import sys, numpy as np\n"
        "sys.modules['numba'] = None  # import numba raises ImportError\n"
        "from lance_spark_ops.encoding.compression import compiled\n"
        "from lance_spark_ops.encoding.compression.fsst import (fsst_compress, fsst_decompress,\n"
        "    parse_symbol_table)\n"
        "assert compiled.fsst_kernels(1 << 30) is None\n"
        "data = np.frombuffer(b'lance spark column page ' * 60000, np.uint8)\n"
        "offsets = np.arange(0, data.size + 1, 24, dtype=np.int64)\n"
        "raw, out, new = fsst_compress(data, offsets)\n"
        "back, back_offsets = fsst_decompress(parse_symbol_table(raw), out, new)\n"
        "assert back.tobytes() == data.tobytes() and back_offsets.tolist() == offsets.tolist()\n"
        "print('ok', out.size)\n"
    )
    out = run_fresh(script)
    assert out.stdout.startswith("ok") and "compiled FSST kernels unavailable" in out.stderr


@settings(max_examples=30, deadline=None)
@given(vals=string_sets(), repeat=st.integers(1, 200))
def test_compiled_table_rounds_equal_numpy(vals: list[bytes], repeat: int) -> None:
    """The table rounds parse and count their sample with the compiled kernels or with
    numpy: the same tokens, token pairs, counts and sizes, so the same symbol table."""
    from lance_spark_ops.encoding.compression import fsst_kernels

    data, offsets = _arrays(vals * repeat)
    sbuf, soffs = fsst_encode.sample(data, offsets)
    start, end, _ = fsst_encode.pieces(soffs, fsst_encode.SAMPLE_PIECE)
    table = fsst_encode.Table(np.zeros(0, np.uint64), np.zeros(0, np.uint8))
    for frac in fsst_encode.ROUNDS:
        want = fsst_encode._sample_parse(table, sbuf, start, end)
        got = fsst_encode._compiled_parse(fsst_kernels, table, sbuf, start, end)
        assert got.tok.tolist() == want.tok.tolist() and got.prev.tolist() == want.prev.tolist()
        assert got.out_size == want.out_size
        pairs = frac < 128
        counts, keys, cnt = fsst_encode._count_numpy(table, want, pairs)
        scratch = np.zeros(2 * fsst_encode.PAIR_KEYS, np.int32)
        got_counts, got_keys, got_cnt = fsst_kernels.count_tokens(got.tok, got.prev, table.tok_val,
                                                                  table.tok_len, pairs, scratch)
        assert got_counts.tolist() == counts.tolist()
        assert (dict(zip(got_keys.tolist(), got_cnt.tolist(), strict=True))
                == dict(zip(keys.tolist(), cnt.tolist(), strict=True)))
        assert len(got_keys) == len(keys) and not scratch.any()
        val, ln = fsst_encode._candidates(table, want, frac)
        table = fsst_encode.Table(val, ln.astype(np.uint8))
    numpy_table = fsst_encode.build_table(data, offsets, NUMPY)
    compiled_table = fsst_encode.build_table(data, offsets, CodecTuning(compiled_min_bytes=0,
                                                                        compiled_loaded_min_bytes=0))
    assert numpy_table[0].vals.tolist() == compiled_table[0].vals.tolist()
    assert numpy_table[0].lens.tolist() == compiled_table[0].lens.tolist()
    assert numpy_table[1] == compiled_table[1]


def test_kernels_compile_ahead_from_the_command_line() -> None:
    """``python -m lance_spark_ops.compile_kernels`` (a cluster's bootstrap step) loads every
    kernel module (FSST, k-means, HNSW, MinHash, RaBitQ), compiling them into numba's cache when
    needed, builds k-means ahead of time (``kernels_aot``), and says so; with numba missing (and
    no extension built) each is unavailable and it fails."""
    import os
    import subprocess
    import sys
    import tempfile

    cmd = [sys.executable, "-m", "lance_spark_ops.compile_kernels"]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    for what in ("FSST", "k-means", "HNSW", "MinHash", "RaBitQ"):
        assert f"compiled {what} kernels ready" in ok.stdout, ok.stdout
    assert any(line.startswith("ahead-of-time k-means kernels ") and ("ready" in line or "built" in line)
               for line in ok.stdout.splitlines()), ok.stdout
    script = ("import runpy, sys\nsys.modules['numba'] = None\n"
              "runpy.run_module('lance_spark_ops.compile_kernels', run_name='__main__')\n")
    with tempfile.TemporaryDirectory() as empty:  # no extension found there
        env = {**os.environ, "NUMBA_CACHE_DIR": empty}
        bad = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                             env=env)
    lines = bad.stdout.splitlines()
    assert bad.returncode == 1, lines
    assert sum(ln.startswith("compiled ") and "unavailable" in ln for ln in lines) == 5, lines
    assert "ahead-of-time k-means kernels unavailable" in bad.stdout, bad.stdout


def _reference_pick(val: np.ndarray, ln: np.ndarray, gain: np.ndarray) -> tuple[list[int], list[int]]:
    """The table rounds' merge and choice written plainly: duplicates (same value and length)
    summed, ranked by gain, then value, then length; a 3+-byte candidate whose hash slot a
    better one holds dropped; the first 255 kept."""
    merged: dict[tuple[int, int], int] = {}
    for v, n, g in zip(val.tolist(), ln.tolist(), gain.tolist(), strict=True):
        merged[(v, n)] = merged.get((v, n), 0) + g
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
    slots: set[int] = set()
    out: list[tuple[int, int]] = []
    for (v, n), _ in ranked:
        if n >= 3:
            slot = int(fsst_encode._slot(np.array([v], np.uint64))[0])
            if slot in slots:
                continue
            slots.add(slot)
        out.append((v, n))
    out = out[: fsst_encode.MAX_SYMBOLS]
    return [v for v, _ in out], [n for _, n in out]


@pytest.mark.parametrize("seed", range(12))
def test_candidate_merge_and_pick_equal_the_plain_rule(seed: int) -> None:
    """``_sum_gains`` + ``_pick`` (one-key merge below 8 bytes, ranking only the best
    candidates when there are many) choose what the plain rule chooses: ties in gain, one
    value at several lengths up to 8 with equal gains, 8-byte values using all 64 bits, few
    and many candidates, and best candidates colliding in one hash slot, so the choice
    reaches past the ranked prefix."""
    rng = np.random.default_rng(seed)
    n = [50, 300, 3000, 9000][seed % 4]
    ln = rng.integers(1, 9, n)
    val = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n).astype(np.uint64)
    val &= fsst_encode._U64_MASK[ln]
    gain = rng.integers(1, 4 if seed % 2 else 10**6, n)
    if seed % 3 == 0:  # the best candidates: 3+ bytes, all in the hash slot of "abc"
        top = np.flatnonzero(ln >= 3)
        val[top] = (val[top] & ~np.uint64(0xFFFFFF)) | np.uint64(0x636261)
        gain[top] += 10**7
    # one value at lengths 1, 2, 3, 8 (zero bytes after "a"), the same gain: shorter first
    tie_val = np.full(4, 0x61, np.uint64)
    tie_ln = np.array([8, 3, 1, 2])
    val, ln = np.concatenate((val, tie_val)), np.concatenate((ln, tie_ln))
    gain = np.concatenate((gain, np.full(4, 10**8)))
    got_val, got_ln = fsst_encode._pick(*fsst_encode._sum_gains(val, ln, gain))
    want_val, want_ln = _reference_pick(val, ln, gain)
    assert got_val.tolist() == want_val and got_ln.tolist() == want_ln
