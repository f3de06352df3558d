"""Our FTS analyzer's tokens equal pylance's (``lance.tokenize``, the tokenizer its INVERTED
index uses) on tricky texts, every base tokenizer and filter setting, stop words, the Snowball
stemmer and character-by-character over many Unicode blocks."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lance_spark_ops.index.fts.tokenizer import Analyzer, check_params

lance = pytest.importorskip("lance")

TEXTS = [
    "The quick brown fox jumps over the lazy dog!", "Café déjà vu naïve résumé Æsir Øre łódź straße",
    "running runs ran runner's caresses ponies", "  leading and trailing  ", "",
    "foo_bar baz-qux 123abc 3.14",
    "İstanbul ΣΑΣ ǅemal Ⅻ ½ ² ﬁ ŉ ℌ ① ｆｕｌｌ ĸ ſ µ ⓐⓑ", "e\u0301cole 中文字 ہندی हिन्दी ไทย",
    "x" * 39 + " " + "y" * 40 + " " + "é" * 20 + " " + "ü" * 19,
    "I've been there, they're here; it's what's-it",
    "tab\tsep\nnew\u00a0nbsp\u2003em", "HELLO hello HeLLo", "generously dying lying agreed feed ugly early",
    "a b c d e f g", "ÀÉÎÕÜ àéîõü ÇçÑñ", "Ⅰ Ⅱ ㊿ ¼ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "emoji 👍🏽 and #hashtag @user e-mail@x.org",
]
SETTINGS = [{}, {"stem": False, "remove_stop_words": False}, {"base_tokenizer": "whitespace"},
            {"ascii_folding": False, "lower_case": False}, {"max_token_length": 5},
            {"max_token_length": None},
            {"base_tokenizer": "raw"}, {"custom_stop_words": ["fox", "dog"]}, {"ascii_folding": False},
            {"lower_case": False}, {"base_tokenizer": "whitespace", "stem": False, "ascii_folding": False}]


def ours(texts: list[str], params: dict) -> list[list[tuple[str, int]]]:
    tk = Analyzer(check_params(params)).tokenize(pa.array(texts, pa.string()))
    out: list[list[tuple[str, int]]] = [[] for _ in texts]
    for d, t, p in zip(tk.doc.tolist(), tk.token.tolist(), tk.position.tolist(), strict=True):
        out[d].append((tk.vocab[t], p))
    # lance.tokenize counts positions from the first kept token
    return [[(s, p - toks[0][1]) for s, p in toks] if toks else [] for toks in out]


def theirs(text: str, params: dict) -> list[tuple[str, int]]:
    return [(t.text, t.position) for t in lance.tokenize(text, **params)]


@pytest.mark.parametrize("params", SETTINGS, ids=[str(s) for s in SETTINGS])
def test_tricky_texts(params):
    got = ours(TEXTS, params)
    for text, g in zip(TEXTS, got, strict=True):
        assert g == theirs(text, params), text


CANDIDATE_STOPS = """
i me my myself we us our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that these
those am is are was were be been being have has had having do does did doing would should could
ought i'm you're he's she's it's we're they're i've you've we've they've i'd you'd he'd she'd we'd
they'd i'll you'll he'll she'll we'll they'll isn't aren't wasn't weren't hasn't haven't hadn't
doesn't don't didn't won't wouldn't shan't shouldn't can't cannot couldn't mustn't let's that's
who's what's here's there's when's where's why's how's a an the and but if or because as until while
of at by for with about against between into through during before after above below to from up down
in out on off over under again further then once here there when where why how all any both each few
more most other some such no nor not only own same so than too very will just can s t don should now
d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn
wasn weren won wouldn also else may might must shall upon yet via etc""".split()


def test_stop_words():
    params = {"base_tokenizer": "whitespace", "stem": False}
    got = ours(CANDIDATE_STOPS, params)
    for w, g in zip(CANDIDATE_STOPS, got, strict=True):
        assert g == theirs(w, params), w


WORDS = """consign consigned consigning consignment consist consisted consistency consistent consistently
consisting consists consolation consolations consolatory console consoled consoles consolidate consolidated
consolidating consoling consolingly consols consonant consort consorted consorting conspicuous conspicuously
conspiracy conspirator conspirators conspire conspired conspiring constable constables constance constancy
constant knack knackeries knacks knag knave knaves knavish kneaded kneading knee kneel kneeled kneeling kneels
knees knell knelt knew knick knif knife knight knightly knights knit knits knitted knitting knives knob knobs
knock knocked knocker knockers knocking knocks knopp knot knots generously generous generation generational
happily happiness relational relativity conditional rational valency hesitancy digitizer conformably
radically differently vilely analogously vietnamization predication operator feudalism decisiveness
hopefulness callousness formality sensitivity sensibility triplicate formative formalize electriciti
electrical hopeful goodness revival allowance inference airliner gyroscopic adjustable defensible irritant
replacement adjustment dependent adoption homologou communism activate angulariti homologous effective
bowdlerize skies dying lying tying news innings outing canning herring earring proceed exceed succeed idly
gently ugly early only singly sky howe atlas cosmos bias andes cried ties gas this kiwis""".split()


def test_stemmer_word_list():
    params = {"stem": True, "remove_stop_words": False}
    got = ours(WORDS, params)
    for w, g in zip(WORDS, got, strict=True):
        assert g == theirs(w, params), w


# Unicode blocks whose characters are all assigned in the Unicode version pylance's Rust uses
# (a handful of code points new in Unicode 17, e.g. U+05C8, U+208F, are left out)
BLOCKS = [(0xA0, 0x250), (0x250, 0x2B0), (0x300, 0x370), (0x370, 0x530), (0x5D0, 0x700), (0x900, 0xA00),
          (0xE00, 0xE80), (0x1E00, 0x2000), (0x2070, 0x208F), (0x20A0, 0x2190), (0x2460, 0x2500),
          (0x3000, 0x3100), (0xFB00, 0xFB50), (0xFF10, 0xFF5B)]


@pytest.mark.parametrize("params", [{"stem": False, "remove_stop_words": False},
                                    {"stem": False, "remove_stop_words": False, "ascii_folding": False}])
def test_every_character(params):
    texts = ["x" + chr(c) + "x" for a, b in BLOCKS for c in range(a, b)]
    got = ours(texts, params)
    bad = [(t, g, theirs(t, params)) for t, g in zip(texts, got, strict=True) if g != theirs(t, params)]
    assert not bad, bad[:10]


@pytest.mark.parametrize("base", ["simple", "whitespace"])
def test_fast_split_cuts_the_regex_pieces(base: str) -> None:
    """The ASCII whitespace split (taken for ``whitespace`` always, for ``simple`` on texts of
    ASCII letters, digits and spaces) keeps the non-empty pieces the regex split keeps."""
    import numpy as np
    import pyarrow.compute as pc

    from lance_spark_ops.index.fts.tokenizer import _SPLIT, _split

    rng = np.random.default_rng(1)
    alphabet = list("ab Z09 ") if base == "simple" else list("aé\t\n\x0b\x0c\r ,.\u00a0\u2003x")
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 12))) for _ in range(400)]
    texts = pa.array([*texts, None, "", " "], pa.large_string())
    if base == "simple":
        assert not pc.any(pc.match_substring_regex(texts, "[^0-9A-Za-z ]")).as_py()  # the fast path

    def pieces(lists: pa.Array) -> list:
        return [None if v is None else [p for p in v if p] for v in lists.to_pylist()]

    assert pieces(_split(texts, base)) == pieces(pc.split_pattern_regex(texts, _SPLIT[base]))


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_fast_split_check_is_the_regex(kind: pa.DataType) -> None:
    """The byte-table check that picks the fast split answers as the regex it replaced
    (``[^0-9A-Za-z ]`` nowhere), on slices (offsets not at 0), nulls, empty and non-ASCII texts."""
    import numpy as np
    import pyarrow.compute as pc

    from lance_spark_ops.index.fts.tokenizer import _only_alnum_space

    rng = np.random.default_rng(3)
    for alphabet in ("ab Z09 ", "ab Z09 .", "ab é", "a\tb", "ab\x00"):
        for _ in range(30):
            n = int(rng.integers(0, 8))
            texts = ["".join(rng.choice(list(alphabet), rng.integers(0, 6))) for _ in range(n)]
            arr = pa.array([*texts, None] if rng.random() < 0.5 else texts, kind)
            lo = int(rng.integers(0, len(arr) + 1))
            for a in (arr, arr.slice(lo), arr.slice(0, lo)):
                want = not pc.any(pc.match_substring_regex(a, "[^0-9A-Za-z ]")).as_py()
                assert _only_alnum_space(a) == want, (a, want)


def test_occurrence_order_is_the_three_key_sort() -> None:
    import numpy as np

    from lance_spark_ops.index.fts.postings import occurrence_order

    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 9, 300)
    doc = np.repeat(np.arange(300), lengths).astype(np.uint32)
    position = np.concatenate([np.arange(n) for n in lengths]).astype(np.uint32)
    for ntok in (50, 70000):
        tid = rng.integers(0, ntok, len(doc))
        want = np.lexsort((position, doc, tid))
        assert (occurrence_order(tid, doc, position, ntok) == want).all()
        shuffled = rng.permutation(len(doc))  # not in (doc, position) order: the lexsort itself
        got = occurrence_order(tid[shuffled], doc[shuffled], position[shuffled], ntok)
        assert (got == np.lexsort((position[shuffled], doc[shuffled], tid[shuffled]))).all()


def test_full_blocks_are_the_per_block_bytes() -> None:
    """``full_blocks`` (built in place) holds per block: f32 score, the sorted doc block as
    ``sorted_blocks`` packs it, u8 bits + ``pack4x`` of the frequencies."""
    import numpy as np

    from lance_spark_ops.index.fts.postings import _num_bits, full_blocks, pack4x, sorted_blocks

    rng = np.random.default_rng(0)
    docs = np.sort(rng.integers(0, 1 << 30, (300, 128)), axis=1).astype(np.uint32)
    docs[:5] = np.arange(128, dtype=np.uint32)[None] + 7
    freqs = rng.integers(1, 300, (300, 128)).astype(np.uint32)
    freqs[:10] = 1
    scores = rng.random(300).astype(np.float32)
    bits = _num_bits(freqs)
    want = [scores[k].astype("<f4").tobytes() + sb + bytes([int(bits[k])]) + pk
            for k, (sb, pk) in enumerate(zip(sorted_blocks(docs), pack4x(freqs, bits), strict=True))]
    assert full_blocks(scores, docs, freqs).to_pylist() == want


def test_pack4x_matrix_is_bitpacker4x() -> None:
    """Every bit width against BitPacker4x's definition, one lane at a time as a Python int:
    value j of lane l (the block's value 4 j + l) at bits [j b, (j + 1) b), the lane's words
    little-endian, word w of lane l at byte 16 w + 4 l; bits above ``b`` are not packed."""
    import numpy as np

    from lance_spark_ops.index.fts.postings import pack4x_matrix

    rng = np.random.default_rng(4)
    for b in range(1, 33):
        blocks = rng.integers(0, 1 << 32, (3, 128), dtype=np.uint64).astype(np.uint32)
        blocks[0] &= np.uint32((1 << b) - 1) if b < 32 else np.uint32(0xFFFFFFFF)
        got = pack4x_matrix(blocks, b)
        for k, block in enumerate(blocks.tolist()):
            want = bytearray(16 * b)
            for lane in range(4):
                acc = sum((block[4 * j + lane] & ((1 << b) - 1)) << (j * b) for j in range(32))
                for w in range(b):
                    at = 16 * w + 4 * lane
                    want[at:at + 4] = ((acc >> (32 * w)) & 0xFFFFFFFF).to_bytes(4, "little")
            assert got[k].tobytes() == bytes(want), (b, k)


def test_unpack4x_inverts_pack4x_at_every_width() -> None:
    import numpy as np

    from lance_spark_ops.index.fts.postings import pack4x_matrix, unpack4x

    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 1 << 32, (33 * 3, 128), dtype=np.uint64).astype(np.uint32)
    bits = np.repeat(np.arange(33), 3).astype(np.uint8)
    blocks[bits < 32] &= ((np.uint64(1) << bits[bits < 32].astype(np.uint64)) - 1)[:, None].astype(np.uint32)
    packed = [pack4x_matrix(blocks[k:k + 1], int(bits[k]))[0] if bits[k] else np.zeros(0, np.uint8)
              for k in range(len(blocks))]
    starts = np.concatenate([[0], np.cumsum([len(p) for p in packed])[:-1]]) + 3
    data = np.concatenate([np.full(3, 0xFF, np.uint8), *packed, np.full(5, 0xFF, np.uint8)])
    assert np.array_equal(unpack4x(data, starts, bits), blocks)
