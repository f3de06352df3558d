"""Comparable summaries of page encodings: the layout and, for each buffer (values,
dictionary, def, rep), the chain of ``CompressiveEncoding`` oneof names from the outside
in. Used to check that our writer picks what pylance picks."""

from __future__ import annotations

from google.protobuf.message import Message

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb

# which child each codec wraps, for the chain
_CHILD = {"general": "values", "byte_stream_split": "values", "fsst": "values", "rle": "values",
          "out_of_line_bitpacking": "values", "fixed_size_list": "values", "packed_struct": "values",
          "variable": "offsets"}

Signature = tuple


def codec_chain(enc: pb.CompressiveEncoding | None) -> tuple[str, ...]:
    out: list[str] = []
    while enc is not None and enc.ByteSize():
        kind = enc.WhichOneof("compression")
        if kind is None:
            break
        out.append(kind)
        msg: Message = getattr(enc, kind)
        child = _CHILD.get(kind)
        enc = getattr(msg, child) if child and msg.HasField(child) else None
    return tuple(out)


def page_signature(layout: pb.PageLayout) -> Signature:
    """(layout, values chain, dictionary chain, def chain, rep chain)."""
    kind = layout.WhichOneof("layout")
    if kind == "mini_block_layout":
        m = layout.mini_block_layout
        return ("mini_block", codec_chain(m.value_compression),
                codec_chain(m.dictionary) if m.HasField("dictionary") else (),
                codec_chain(m.def_compression) if m.HasField("def_compression") else (),
                codec_chain(m.rep_compression) if m.HasField("rep_compression") else ())
    if kind == "full_zip_layout":
        return ("full_zip", codec_chain(layout.full_zip_layout.value_compression), (), (), ())
    if kind == "constant_layout":
        c = layout.constant_layout
        return ("constant" if c.HasField("inline_value") or False else "constant", (), (),
                codec_chain(c.def_compression) if c.HasField("def_compression") else (),
                codec_chain(c.rep_compression) if c.HasField("rep_compression") else ())
    if kind == "blob_layout":
        return ("blob", (), (), (), ())
    return (str(kind), (), (), (), ())


def plan_signature(plan) -> Signature:
    """The signature our strategy's ``PagePlan`` predicts (see ``page_signature``)."""
    def chain(c) -> tuple[str, ...]:
        return c.chain() if c is not None else ()

    layout = {"all_null": "constant"}.get(plan.layout, plan.layout)
    if layout == "constant":
        return ("constant", (), (), chain(plan.def_codec), chain(plan.rep_codec))
    if layout == "full_zip":
        return ("full_zip", chain(plan.values), (), (), ())
    if layout == "blob":
        return ("blob", (), (), (), ())
    return ("mini_block", chain(plan.values), chain(plan.dictionary_codec), chain(plan.def_codec),
            chain(plan.rep_codec))


def drop_general(sig: Signature) -> Signature:
    """``sig`` with a leading General removed from the values chain (mini-block General
    is skipped at run time when it would not shrink the data)."""
    layout, values, *rest = sig
    if layout == "mini_block" and values[:1] == ("general",):
        values = values[1:]
    return (layout, values, *rest)
