"""The one quantity parser: exact values, the grammar's traps, and round-trips."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.api.quantity import (
    NON_NEGATIVE_QUANTITY_PATTERN,
    QUANTITY_PATTERN,
    InvalidQuantityError,
    format_quantity,
    is_quantity,
    parse_quantity,
    to_int_ceil,
    to_milli,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Decimal(0)),
        ("1", Decimal(1)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+2", Decimal(2)),
        ("-2", Decimal(-2)),
        ("500m", Decimal("0.5")),
        ("1m", Decimal("0.001")),
        ("250u", Decimal("0.00025")),
        ("3n", Decimal("3e-9")),
        ("2k", Decimal(2000)),
        ("3M", Decimal(3_000_000)),
        ("4G", Decimal(4 * 10**9)),
        ("5T", Decimal(5 * 10**12)),
        ("6P", Decimal(6 * 10**15)),
        ("1E", Decimal(10**18)),  # exa, not an exponent
        ("1Ki", Decimal(1024)),
        ("16Gi", Decimal(16 * 2**30)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2Ti", Decimal(2 * 2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),  # exponent, because digits follow
        ("2.5e-3", Decimal("0.0025")),
        ("1e+2", Decimal(100)),
        ("0.1Ki", Decimal("102.4")),
    ],
)
def test_parses_exactly(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1K",
        "1KI",
        "1ki",
        "Gi",
        "1Gi2",
        "abc",
        "1.2.3",
        "--1",
        "1e",
        "1e1.5",
        "1mi",
        "0x10",
        "1_000",
        "∞",
        "1 Gi",
        "12XB",
        "+-1",
        ".",
    ],
)
def test_rejects_malformed(text: str) -> None:
    with pytest.raises(InvalidQuantityError):
        parse_quantity(text)
    assert not is_quantity(text)
    assert re.match(QUANTITY_PATTERN, text) is None


def test_non_strings() -> None:
    assert parse_quantity(4) == 4
    assert parse_quantity(Decimal("0.25")) == Decimal("0.25")
    for bad in (True, 1.5, None, Decimal("NaN"), Decimal("Infinity")):
        with pytest.raises(InvalidQuantityError):
            parse_quantity(bad)  # type: ignore[arg-type]


def test_huge_exponent_refused() -> None:
    with pytest.raises(InvalidQuantityError):
        parse_quantity("1e999999999")
    with pytest.raises(InvalidQuantityError):
        parse_quantity("1" * 2000)


def test_rounding_helpers_round_up() -> None:
    assert to_milli("1") == 1000
    assert to_milli("0.0001") == 1  # like Kubernetes: a CPU request never rounds to zero
    assert to_milli("1500m") == 1500
    assert to_int_ceil("1.2") == 2
    assert to_int_ceil("16Gi") == 16 * 2**30
    assert to_int_ceil("-1.5") == -1


def test_non_negative_pattern() -> None:
    assert re.match(NON_NEGATIVE_QUANTITY_PATTERN, "16Gi")
    assert re.match(NON_NEGATIVE_QUANTITY_PATTERN, "+1")
    assert re.match(NON_NEGATIVE_QUANTITY_PATTERN, "-1") is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal(0), "0"),
        (Decimal(1024), "1024"),
        (Decimal(2**30), "1Gi"),
        (Decimal(3 * 2**20), "3Mi"),
        (Decimal("1.5"), "1500m"),
        (Decimal("0.0005"), "0.0005"),
        (Decimal(7), "7"),
        (-(2**21), "-2Mi"),
    ],
)
def test_format(value: Decimal, text: str) -> None:
    assert format_quantity(value) == text


_suffixes = st.sampled_from(
    [
        "",
        "m",
        "u",
        "n",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "e3",
        "e-2",
    ]
)


@given(
    whole=st.integers(min_value=0, max_value=10**12),
    frac=st.one_of(st.none(), st.integers(min_value=0, max_value=999_999)),
    suffix=_suffixes,
    negative=st.booleans(),
)
def test_generated_quantities_parse_and_match_pattern(
    whole: int, frac: int | None, suffix: str, negative: bool
) -> None:
    text = f"{'-' if negative else ''}{whole}{'' if frac is None else f'.{frac}'}{suffix}"
    assert re.match(QUANTITY_PATTERN, text)
    value = parse_quantity(text)
    assert (value < 0) == (negative and value != 0)
    # Scaling by the suffix is exact: dividing back gives the literal number.
    number = Decimal(f"{whole}{'' if frac is None else f'.{frac}'}")
    assert abs(value) >= 0
    if suffix in ("", "e3", "Ki"):
        factor = {"": 1, "e3": 1000, "Ki": 1024}[suffix]
        assert abs(value) == number * factor


@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=6, min_value=-(10**15), max_value=10**15
    )
)
def test_format_round_trips(value: Decimal) -> None:
    text = format_quantity(value)
    assert re.match(QUANTITY_PATTERN, text), text
    assert parse_quantity(text) == value


@given(st.integers(min_value=0, max_value=2**62))
def test_integers_round_trip(n: int) -> None:
    assert parse_quantity(format_quantity(n)) == n
