"""Kubernetes resource quantities ("500m", "16Gi", "1.5", "2e3") as exact numbers.

This is the one parser the whole project uses (models, scheduler core, runtime), so that "how much
is 1.5Gi" has exactly one answer. Values are returned as `decimal.Decimal` computed in a private
high-precision context: every valid quantity (suffix up to Ei = 2**60, exponents within the range
Kubernetes accepts) is represented exactly, never as a rounded float.

The grammar is the one of `k8s.io/apimachinery/pkg/api/resource`:

    quantity   ::= <signedNumber><suffix>
    suffix     ::= <binarySI> | <decimalExponent> | <decimalSI>
    binarySI   ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI  ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= "e" <signedNumber> | "E" <signedNumber>   (integer exponents only)

Note the traps the grammar sets: "1E" is 10**18 (exa) but "1E3" is 1000; "k" is kilo but "K" is
not a suffix at all (only "Ki" is); "m" is milli while "M" is mega.
"""

from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal
from typing import Final

__all__ = [
    "NON_NEGATIVE_QUANTITY_PATTERN",
    "QUANTITY_PATTERN",
    "InvalidQuantityError",
    "format_quantity",
    "is_quantity",
    "parse_quantity",
    "to_int_ceil",
    "to_milli",
]

_BINARY: Final[dict[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_EXP: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_SUFFIX = r"(?:[KMGTPE]i|[eE][+-]?[0-9]+|[numkMGTPE])?"

#: Regex (ECMA/RE2 compatible, usable in an OpenAPI `pattern`) for any quantity, sign allowed.
QUANTITY_PATTERN: Final = rf"^[+-]?{_NUMBER}{_SUFFIX}$"
#: Same, but without a leading minus: what every spec field that requests resources accepts.
NON_NEGATIVE_QUANTITY_PATTERN: Final = rf"^[+]?{_NUMBER}{_SUFFIX}$"

_RE: Final = re.compile(rf"^(?P<sign>[+-]?)(?P<num>{_NUMBER})(?P<suffix>{_SUFFIX})$")

# Kubernetes rejects exponents whose magnitude would overflow its internal int64 scale; bounding
# them here keeps a hostile "1e999999999" from allocating a huge Decimal.
_MAX_ABS_EXPONENT: Final = 1000
# Enough digits that any accepted quantity is exact: mantissas are bounded by the string length we
# accept and 2**60 has 19 digits.
_CTX: Final = decimal.Context(prec=2100, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_MAX_LEN: Final = 1024


class InvalidQuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | Decimal) -> Decimal:
    """Parse a Kubernetes quantity to its exact value.

    `int` and `Decimal` pass through (YAML `cpu: 4` arrives as an int). `float` is refused on
    purpose: it is where rounding errors enter, and the wire format never needs it.

    >>> parse_quantity("500m")
    Decimal('0.500')
    >>> parse_quantity("1.5Gi")
    Decimal('1610612736.0')
    """
    if isinstance(value, bool):  # bool is an int subclass; True is not "1 CPU"
        raise InvalidQuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidQuantityError(f"not a finite quantity: {value!r}")
        return value
    if not isinstance(value, str):
        raise InvalidQuantityError(f"not a quantity: {value!r}")
    if len(value) > _MAX_LEN:
        raise InvalidQuantityError(f"quantity longer than {_MAX_LEN} characters")
    m = _RE.match(value)
    if m is None:
        raise InvalidQuantityError(
            f"invalid quantity {value!r}: expected a number with an optional suffix "
            "(n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)"
        )
    sign, num, suffix = m.group("sign"), m.group("num"), m.group("suffix")
    mantissa = Decimal(num.rstrip(".") if num.endswith(".") else num)
    if sign == "-":
        mantissa = -mantissa
    if suffix in _BINARY:
        return _CTX.multiply(mantissa, Decimal(_BINARY[suffix]))
    if suffix in _DECIMAL_EXP:
        exp = _DECIMAL_EXP[suffix]
    else:  # decimal exponent form: e3, E-2
        exp = int(suffix[1:])
        if abs(exp) > _MAX_ABS_EXPONENT:
            raise InvalidQuantityError(f"quantity exponent out of range: {value!r}")
    return mantissa.scaleb(exp, _CTX)


def is_quantity(value: object) -> bool:
    """True when `value` parses as a quantity (strings, ints and finite Decimals)."""
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except InvalidQuantityError:
        return False
    return True


def to_milli(value: str | int | Decimal) -> int:
    """The quantity in thousandths, rounded up (Kubernetes rounds CPU up to 1m the same way)."""
    return math.ceil(_CTX.multiply(parse_quantity(value), Decimal(1000)))


def to_int_ceil(value: str | int | Decimal) -> int:
    """The quantity rounded up to a whole number (bytes of memory, GPUs, pods)."""
    return math.ceil(parse_quantity(value))


def format_quantity(value: Decimal | int) -> str:
    """A canonical short string for an exact value, suitable for status fields.

    Integers that are a whole number of Mi or more use a binary suffix (memory-like values; a
    CPU count of 1024 should stay "1024", not "1Ki"), else a plain integer;
    fractions use milli ("1500m") when exact, else a plain decimal. The output always parses back
    to the same value: `parse_quantity(format_quantity(x)) == x`.
    """
    d = Decimal(value)
    if not d.is_finite():
        raise InvalidQuantityError(f"not a finite quantity: {value!r}")
    if d == d.to_integral_value():
        n = int(d)
        for suffix, factor in reversed(_BINARY.items()):
            if suffix != "Ki" and n != 0 and n % factor == 0:
                return f"{n // factor}{suffix}"
        return str(n)
    milli = _CTX.multiply(d, Decimal(1000))
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    # Plain positional notation (never scientific), so the string matches QUANTITY_PATTERN.
    return format(d.normalize(_CTX), "f")
