"""Floats as Lance's Rust side reads and writes them in JSON metadata (serde_json defaults).

serde_json without its ``float_roundtrip`` feature parses a decimal as its digits (a u64)
divided or multiplied by a power of ten, which can land one ulp off the nearest double
("0.9999687671661377" reads as 0.9999687671661376); it writes the shortest round-trip digits
in ryu's layout (``0.00006777048110961914``, ``3.635883331298828e-6``, ``1.0``). pylance 14
re-serialises an IVF_HNSW_SQ storage's ``bounds`` so when it remaps the index; the second
pass is a fixed point.
"""

from __future__ import annotations

import re
from decimal import Decimal

_NUMBER = re.compile(r"^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$")


def parse(token: str) -> float:
    """The double serde_json's default parser makes of a JSON number token."""
    m = _NUMBER.match(token)
    if m is None:
        raise ValueError(f"not a JSON number: {token!r}")
    sign, whole, frac, exp = m.groups()
    digits = (whole + (frac or "")).lstrip("0") or "0"
    significand = int(digits)
    if significand >= 1 << 64:  # serde's long path rounds correctly
        return float(token)
    exponent = int(exp or 0) - len(frac or "")
    f = float(significand)
    if exponent > 308 or exponent < -308:
        return float(token)
    f = f * float(f"1e{exponent}") if exponent >= 0 else f / float(f"1e{-exponent}")
    return -f if sign else f


def format_float(x: float) -> str:
    """ryu's ``format_finite`` (serde_json's float output)."""
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign, digits_t, exp = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digits_t))
    n, kk = len(digits), len(digits) + exp  # value = 0.digits x 10^kk
    head = "-" if x < 0 else ""
    if 0 <= exp and kk <= 16:
        return f"{head}{digits}{'0' * exp}.0"
    if 0 < kk <= 16:
        return f"{head}{digits[:kk]}.{digits[kk:]}"
    if -5 < kk <= 0:
        return f"{head}0.{'0' * -kk}{digits}"
    if n == 1:
        return f"{head}{digits}e{kk - 1}"
    return f"{head}{digits[0]}.{digits[1:]}e{kk - 1}"


def reserialize(token: str) -> str:
    return format_float(parse(token))
