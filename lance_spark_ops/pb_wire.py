"""Protobuf wire pieces written by hand, where a message is spliced rather than built (fields
the generated protos do not know yet, pre-serialized fragment runs)."""

from __future__ import annotations

__all__ = ["encode_varint"]


def encode_varint(n: int) -> bytes:
    """``n`` as a protobuf varint (a negative int64 as its 64-bit two's complement, as protobuf)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
