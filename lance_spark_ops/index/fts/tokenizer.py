"""pylance 14's FTS text analysis (base tokenizer + filters), vectorised (no I/O).

Pipeline, in pylance's order: base tokenizer (``simple``: runs of alphanumeric characters;
``whitespace``: runs of non-ASCII-whitespace; ``raw``: the whole text) -> RemoveLong (tokens
of ``max_token_length`` bytes or more leave, gaps stay in the positions) -> lower case (per
character, no final-sigma rule) -> Snowball stemmer -> stop words -> ASCII folding. Every
filter is a function of one token, so it runs once per *distinct* token (a dict), and the
token stream is split with pyarrow's regex kernels. Positions are the token's ordinal in the
base tokenizer's stream (removed tokens leave gaps), as pylance stores them.

ASCII folding: a character's compatibility decomposition (NFKD) without its marks, letters
that have none (ß, æ, ø, ł, ...) spelled out, keeping the ASCII part; characters with no
ASCII part stay.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.fts.alnum import split_pattern
from lance_spark_ops.index.fts.stop_words import ENGLISH_STOP_WORDS
from lance_spark_ops.index.params import IndexParams


@dataclass(frozen=True, eq=False)
class TokenizerParams(IndexParams):
    """An INVERTED build's checked parameters (pylance's names, ``DEFAULT_PARAMS``' order: the
    ``metadata.lance`` params JSON is ``as_dict()``)."""

    lance_tokenizer: str = "text"
    base_tokenizer: str = "simple"
    language: str = "English"
    with_position: bool = False
    max_token_length: int | None = 40
    lower_case: bool = True
    stem: bool = True
    remove_stop_words: bool = True
    custom_stop_words: list[str] | None = None  # a list, as pylance reports it
    ascii_folding: bool = True
    min_ngram_length: int = 3
    max_ngram_length: int = 3
    prefix_only: bool = False
    block_size: int = 128
    split_identifiers: bool = False
    split_on_numerics: bool = False
    preserve_original: bool = False
    index_operators: bool = False


# pylance 14's defaults for create_scalar_index(..., "INVERTED") (its index_stats shows them)
DEFAULT_PARAMS: dict[str, Any] = TokenizerParams().as_dict()
BASE_TOKENIZERS = ("simple", "whitespace", "raw")
_SPLIT = {"simple": split_pattern(), "whitespace": r"[\t\n\x0b\x0c\r ]+"}
_CODE_FLAGS = ("split_identifiers", "split_on_numerics", "preserve_original", "index_operators")
_BOOL = ("with_position", "lower_case", "stem", "remove_stop_words", "ascii_folding", "prefix_only",
         "split_identifiers", "split_on_numerics", "preserve_original", "index_operators")


def check_params(params: Mapping[str, Any]) -> TokenizerParams:
    """``params`` (pylance's names) parsed once into the full parameter set (pylance's defaults
    filled in); InvalidInputError names a bad one, UnsupportedError a tokenizer this library
    does not reproduce."""
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        raise InvalidInputError(f"INVERTED index: unknown parameter(s) {unknown}; "
                                f"known: {sorted(DEFAULT_PARAMS)}")
    out = dict(DEFAULT_PARAMS)
    out.update(params)
    for k in _BOOL:
        if not isinstance(out[k], bool):
            raise InvalidInputError(f"INVERTED index: parameter {k} must be a bool, got {out[k]!r}")
    base = out["base_tokenizer"]
    if not isinstance(base, str):
        raise InvalidInputError(f"INVERTED index: base_tokenizer must be a string, got {base!r}")
    if base not in BASE_TOKENIZERS:
        if base == "ngram" or base.startswith(("jieba", "lindera", "icu")) or base == "code":
            raise UnsupportedError(f"INVERTED index: base_tokenizer {base!r} is not supported by this "
                                   f"library (supported: {', '.join(BASE_TOKENIZERS)})")
        raise InvalidInputError(f"INVERTED index: unknown base_tokenizer {base!r}")
    if out["lance_tokenizer"] != "text":
        raise UnsupportedError(f"INVERTED index: lance_tokenizer {out['lance_tokenizer']!r} (JSON documents) "
                               "is not supported; only 'text'")
    builtin_stops = out["remove_stop_words"] and out["custom_stop_words"] is None
    if str(out["language"]).lower() != "english" and (out["stem"] or builtin_stops):
        raise UnsupportedError(f"INVERTED index: language {out['language']!r} with stemming or built-in stop "
                               "words is not supported; only English")
    out["language"] = "English" if str(out["language"]).lower() == "english" else out["language"]
    mtl = out["max_token_length"]
    if mtl is not None and (isinstance(mtl, bool) or not isinstance(mtl, int) or mtl <= 0):
        raise InvalidInputError(f"INVERTED index: max_token_length must be a positive int or None, "
                                f"got {mtl!r}")
    csw = out["custom_stop_words"]
    if csw is not None and (not isinstance(csw, (list, tuple)) or not all(isinstance(w, str) for w in csw)):
        raise InvalidInputError(f"INVERTED index: custom_stop_words must be a list of strings, got {csw!r}")
    out["custom_stop_words"] = list(csw) if csw is not None else None
    if out["block_size"] != 128:
        raise UnsupportedError(f"INVERTED index: block_size {out['block_size']!r}; only 128 is supported")
    if any(out[k] for k in _CODE_FLAGS):
        raise InvalidInputError("INVERTED index: code analyzer flags require base_tokenizer='code'")
    for k in ("min_ngram_length", "max_ngram_length"):
        if isinstance(out[k], bool) or not isinstance(out[k], int) or out[k] <= 0:
            raise InvalidInputError(f"INVERTED index: {k} must be a positive int, got {out[k]!r}")
    return TokenizerParams(**out)


@dataclass(frozen=True)
class Tokens:
    """A batch's token stream: per token its document (row index in the batch), its text's id
    in ``vocab`` and its position; plus per document its token count."""

    doc: np.ndarray        # int64
    token: np.ndarray      # int64 into vocab
    position: np.ndarray   # uint32
    vocab: list[str]
    num_tokens: np.ndarray  # uint32, one per input row (0 for nulls)


def _lower(t: str) -> str:
    return t.lower() if t.isascii() else "".join(c.lower() for c in t)


_FOLD_SPECIAL = {"ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "ł": "l", "Ł": "L",
                 "đ": "d", "Đ": "D", "œ": "oe", "Œ": "OE", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D",
                 "ı": "i", "ĸ": "k", "ħ": "h", "Ħ": "H", "ŧ": "t", "Ŧ": "T", "ŋ": "n", "Ŋ": "N",
                 "ſ": "s"}


def _fold_char(c: str) -> str:
    if c.isascii():
        return c
    s = _FOLD_SPECIAL.get(c)
    if s is not None:
        return s
    # compatibility decomposition, marks dropped, letters without one mapped; keep the ASCII
    d = "".join(_FOLD_SPECIAL.get(x, x) for x in unicodedata.normalize("NFKD", c)
                if unicodedata.category(x) != "Mn")
    return "".join(x for x in d if x.isascii()) or c


def _fold(t: str) -> str:
    return t if t.isascii() else "".join(_fold_char(c) for c in t)


def token_filter(params: TokenizerParams) -> Callable[[list[str]], list[str | None]]:
    """The per-token part of the pipeline over a list of distinct raw tokens: each one's
    indexed token, or None if it leaves. Stemming goes through Snowball's batch call (C with
    PyStemmer installed, else pure Python)."""
    limit = params.max_token_length
    stemmer = None
    if params.stem:
        import snowballstemmer

        stemmer = snowballstemmer.stemmer("english")
    stops: frozenset[str] | None = None
    if params.remove_stop_words:
        csw = params.custom_stop_words
        stops = frozenset(csw) if csw is not None else ENGLISH_STOP_WORDS
    lower, fold = params.lower_case, params.ascii_folding

    def f(tokens: list[str]) -> list[str | None]:
        arr = pa.array(tokens, pa.large_string())
        keep = np.ones(len(tokens), dtype=bool)
        if limit is not None:
            keep = pc.less(pc.binary_length(arr), limit).to_numpy(zero_copy_only=False)
        ts = [t for t, k in zip(tokens, keep.tolist(), strict=True) if k]
        if lower:
            ts = [_lower(t) for t in ts]
        if stemmer is not None:
            ts = stemmer.stemWords(ts)
        out: list[str | None] = [None] * len(tokens)
        it = iter(ts)
        for i in np.nonzero(keep)[0].tolist():
            t = next(it)
            if stops is not None and t in stops:
                continue
            out[i] = _fold(t) if fold else t
        return out

    return f


_ALNUM_SPACE = np.zeros(256, dtype=bool)  # the bytes the fast split of ``simple`` may see
_ALNUM_SPACE[np.frombuffer(b"0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)] = True
_ALNUM_SPACE[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)] = True


def _only_alnum_space(texts: pa.Array) -> bool:
    """Whether the texts' bytes are all ASCII letters, digits and spaces: one table lookup over
    the value buffer (the bytes between the first and last offsets; a null slot's bytes, if
    any, count too - at worst the slower split), not a regex over every string."""
    block = arrow_to_block(texts)  # zero-copy views of the offsets and the value bytes
    if block.num_values == 0:
        return True
    return bool(_ALNUM_SPACE[block.data[int(block.offsets[0]):int(block.offsets[-1])]].all())


def _split(texts: pa.Array, base: str) -> pa.Array:
    """``split_pattern_regex`` on the base tokenizer's separators; Arrow's ASCII whitespace
    split where it cuts the same pieces (4-10x faster): always for ``whitespace`` (the same
    six separators; UTF-8 never holds them inside a character), for ``simple`` when the texts
    hold only ASCII letters, digits and spaces. Empty pieces may differ (dropped after)."""
    if base == "whitespace" or _only_alnum_space(texts):
        return pc.ascii_split_whitespace(texts)
    return pc.split_pattern_regex(texts, _SPLIT[base])


class Analyzer:
    """Tokenizes string arrays with one parameter set; remembers filtered distinct tokens."""

    def __init__(self, params: TokenizerParams) -> None:
        self.params = params
        self._filter = token_filter(params)
        self._memo: dict[str, str | None] = {}

    def _map(self, distinct: list[str]) -> list[str | None]:
        memo = self._memo
        new = [t for t in distinct if t not in memo]
        if new:
            if len(memo) + len(new) > 2_000_000:   # bound memory on huge vocabularies
                memo.clear()
            memo.update(zip(new, self._filter(new), strict=True))
        return [memo[t] for t in distinct]

    def tokenize(self, texts: pa.Array) -> Tokens:
        texts = texts.cast(pa.large_string()) if pa.types.is_large_string(texts.type) is False else texts
        n = len(texts)
        base = self.params.base_tokenizer
        if base == "raw":
            pieces = pc.fill_null(texts, "")
            lengths = np.where(texts.is_null().to_numpy(zero_copy_only=False), 0, 1)
            flat = pc.filter(pieces, texts.is_valid())
            pos = np.zeros(len(flat), dtype=np.uint32)
        else:
            parts = _split(texts, base)
            # drop the empty pieces a leading / trailing separator leaves
            flat_all = parts.flatten()
            lens_all = pc.fill_null(parts.value_lengths(), 0).to_numpy()
            keep = pc.greater(pc.binary_length(flat_all), 0).to_numpy(zero_copy_only=False)
            parent_all = np.repeat(np.arange(n), lens_all)
            flat = pc.filter(flat_all, pa.array(keep))
            parent = parent_all[keep]
            lengths = np.bincount(parent, minlength=n)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            pos = (np.arange(len(parent)) - np.repeat(starts, lengths)).astype(np.uint32)
        parent = np.repeat(np.arange(n), lengths)
        enc = pc.dictionary_encode(flat).combine_chunks() if isinstance(flat, pa.ChunkedArray) \
            else pc.dictionary_encode(flat)
        distinct = enc.dictionary.to_pylist()
        mapped = self._map(distinct)
        # the filtered vocabulary (several raw tokens may map to one indexed token)
        vocab: dict[str, int] = {}
        code = np.empty(len(mapped), dtype=np.int64)
        for i, m in enumerate(mapped):
            code[i] = -1 if m is None else vocab.setdefault(m, len(vocab))
        idx = code[enc.indices.to_numpy(zero_copy_only=False)] if len(enc) else np.empty(0, np.int64)
        live = idx >= 0
        doc = parent[live]
        return Tokens(doc=doc, token=idx[live], position=pos[live], vocab=list(vocab),
                      num_tokens=np.bincount(doc, minlength=n).astype(np.uint32))
