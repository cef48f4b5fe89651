"""Reading the numbers in a reply the way a person reads them (the ``numeric`` check; the arithmetic
benchmark's answers).

A reply's number is its last one (or the last one inside a check's ``pattern`` match). What counts as
one number, and which number it is:

- **Separators** (``decimal``): ``point`` reads ``1,234.5`` (commas group thousands, in threes);
  ``comma`` reads ``1.234,5`` and ``6,2`` (dots group thousands, the comma is the decimal mark);
  ``auto`` (the default) decides per number: with both marks the last one is the decimal mark
  (``1,234.5``, ``1.234,5``); a lone comma followed by exactly three digits groups thousands
  (``1,234`` is 1234, the English reading) and by any other count is a decimal comma (``6,2`` is
  6.2, ``3,14159`` is 3.14159); a lone dot is a decimal point; several marks of one kind group
  thousands when every group has three digits (``1.234.567``), else the number is a list
  (``1,2,3`` reads 1, 2 and 3). A decimal comma with three decimals (the Spanish ``1,250`` meaning
  1.25) needs ``decimal: comma``: ``auto`` cannot tell it from a thousands comma.
- **Minus**: ``-``, the Unicode minus sign U+2212 (``−40``) and its small and full-width forms are a
  sign before a number, unless they join two things: after a letter or a digit (``COVID-19``,
  ``x-5``, ``10-20``) the dash is a hyphen or a subtraction, not a sign.
- **Ranges**: two numbers joined by a dash (``-``, ``‐``, ``‒``, ``–``, ``—``, ``−``; spaces around
  it or not) are a range, and a range is not one number: when it is the last number of the reply
  the reading is "a range", with no value (a ``numeric`` check fails saying so), never its second
  end made negative (``10-20 minutes`` was read as −20). A range followed by more text with a
  number (``10-20, so 15``) reads that number.
- **Dates** are not numbers and are passed over: ``2025-03-15``, ``2025/03/15``, ``15/03/2025``,
  ``15.03.2025``, ``03-15-2025`` and English month-name dates (``March 15, 2025``,
  ``15 March 2025``). A dotted run that is neither a number nor a date (a version, ``1.2.3``) is
  passed over too.

Values are exact (``fractions.Fraction``): the arithmetic benchmark compares them exactly, the
``numeric`` check within its tolerances.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

DECIMALS = ("auto", "point", "comma")
MINUS = "-\u2212\ufe63\uff0d"  # hyphen-minus, minus sign, small and full-width hyphen-minus
DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2212"  # what joins a range's ends: hyphens, figure/en/em dash, minus
MAX_DIGITS, MAX_EXPONENT = 1000, 1000  # longer runs, larger exponents: no value (see numbers)

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_DATES = re.compile(
    r"(?<![\d.,])(?:"
    r"\d{4}([-/.])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12]\d|3[01])"  # 2025-03-15, 2025/3/15
    r"|(?:0?[1-9]|[12]\d|3[01])([-/.])(?:0?[1-9]|[12]\d|3[01])\2(?:\d{4}|\d{2})"  # 15/03/2025, 03-15-25
    r")(?![\d]|[.,]\d)"
    rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b"  # March 15, 2025
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\s+\d{{4}}\b",  # 15 March 2025, 15th of March 2025
    re.I)
# A run of digits with the marks that may separate its groups; an exponent; a leading-dot decimal (.5).
_TOKEN = re.compile(r"(\d+(?:[.,]\d+)*|(?<![\d.,])\.\d+)(?:[eE]([-+\u2212]?\d+)(?![\d.,]))?")


@dataclass(frozen=True)
class Number:
    """One number as read: ``value`` None when what stands there is not one number (``why`` says)."""

    text: str  # as written, sign included ("−40", "1.234,5", "10-20")
    value: Fraction | None
    why: str = ""
    start: int = 0
    end: int = 0


def _groups_of_three(parts: list[str]) -> bool:
    return 1 <= len(parts[0]) <= 3 and all(len(p) == 3 for p in parts[1:])


def _value(body: str, decimal: str) -> list[Fraction] | None:
    """The number(s) a run of digits and marks is: one value, several (a list written ``1,2,3``), or
    None (a dotted run that is no number: a version)."""
    commas, dots = body.count(","), body.count(".")
    if body.startswith(".") or not (commas or dots):
        return [Fraction(body)]

    def grouped(parts: list[str], frac: str | None = None) -> Fraction | None:
        if len(parts) > 1 and not _groups_of_three(parts):
            return None
        return Fraction("".join(parts) + (f".{frac}" if frac is not None else ""))

    if commas and dots:  # both marks (whatever `decimal` says): the last one is the decimal mark
        mark = "," if body.rfind(",") > body.rfind(".") else "."
        head, frac = body.rsplit(mark, 1)
        v = grouped(head.split("." if mark == "," else ","), frac) if body.count(mark) == 1 else None
        return [v] if v is not None else _split(body)
    mark, parts = (",", body.split(",")) if commas else (".", body.split("."))
    if len(parts) > 2:  # 1,234,567 / 1.234.567, else a list (1,2,3) or a version (1.2.3)
        thousands_mark = {"point": ",", "comma": "."}.get(decimal, mark)
        if mark == thousands_mark and _groups_of_three(parts):
            return [Fraction("".join(parts))]
        return _split(body) if mark == "," else None
    head, tail = parts
    if mark == ",":  # a comma groups thousands under `point`, and under `auto` before exactly 3 digits
        if decimal == "point" or (decimal == "auto" and len(tail) == 3):
            return [grouped(parts)] if _groups_of_three(parts) else _split(body)
        return [Fraction(f"{head}.{tail}")]
    if decimal == "comma" and _groups_of_three(parts):  # under `comma` a dot groups thousands
        return [Fraction(head + tail)]
    return [Fraction(f"{head}.{tail}")]


def _split(body: str) -> list[Fraction] | None:
    """A list written without spaces (``1,2,3``): each comma-separated part a number of its own."""
    out = []
    for part in body.split(","):
        if part.count(".") > 1:
            return None
        out.append(Fraction(part))
    return out


def _is_sign(text: str, i: int) -> bool:
    """Whether the mark at ``text[i]`` (a minus or plus) is the sign of the number after it: not when it
    joins two things (a letter, digit or closing bracket right before it: ``COVID-19``, ``x-5``), nor
    after a number across spaces (``10 - 20``, a subtraction or a range)."""
    if i == 0:
        return True
    before = text[i - 1]
    if before.isalnum() or before in ")]}%":
        return False
    if before.isspace():
        j = i - 1
        while j >= 0 and text[j].isspace():
            j -= 1
        return j < 0 or not (text[j].isdigit() or text[j] in ")]}%")
    return True


def numbers(text: str, decimal: str = "auto") -> list[Number]:
    """Every number of ``text`` in order, read as the module docstring says (dates passed over, a
    dash-joined pair one range with no value)."""
    if decimal not in DECIMALS:
        raise ValueError(f"decimal: one of {DECIMALS}, got {decimal!r}")
    masked = _DATES.sub(lambda m: " " * len(m.group(0)), text)
    out: list[Number] = []
    for m in _TOKEN.finditer(masked):
        start, body, exp = m.start(), m.group(1), m.group(2)
        if len(body) > MAX_DIGITS or (exp is not None and abs(int(exp.replace("\u2212", "-"))) > MAX_EXPONENT):
            # a degenerate reply's run of digits (Python reads at most 4,300 into an int) or an exponent
            # past any float: it stands where the last number is, with no value
            why = (f"a number of {len(body)} characters" if len(body) > MAX_DIGITS
                   else f"a number with the exponent {exp}") + ", past what is read as one"
            out.append(Number(text[start:m.end()][:40], None, why, start, m.end()))
            continue
        values = _value(body, decimal)
        if values is None:
            continue
        sign, signed = 1, False
        if start > 0 and masked[start - 1] in MINUS + "+" and _is_sign(masked, start - 1):
            sign, signed = (1 if masked[start - 1] == "+" else -1), True
            start -= 1
        if len(values) == 1:
            end = m.end()
            scale = Fraction(10) ** int(exp.replace("\u2212", "-")) if exp is not None else 1
            here = [Number(text[start:end], sign * values[0] * scale, "", start, end)]
        else:  # a list written without spaces: each part a number at its own place
            here, pos = [], m.start(1)
            for k, (part, v) in enumerate(zip(body.split(","), values)):
                here.append(Number(text[start if k == 0 else pos:pos + len(part)], (sign if k == 0 else 1) * v, "",
                                   start if k == 0 else pos, pos + len(part)))
                pos += len(part) + 1
        # a dash between this number and the one before (no sign of its own): the two are a range
        if out and not signed and out[-1].value is not None \
                and re.fullmatch(rf"\s*[{DASHES}]\s*", masked[out[-1].end:start]):
            first = out.pop()
            rng = text[first.start:here[0].end]
            here[0] = Number(rng, None, f"a range ({rng}), not one number", first.start, here[0].end)
        out.extend(here)
    return out


def last_number(text: str, decimal: str = "auto") -> Number | None:
    """The reply's number as a person reads its answer: the last one (a range: no value, ``why``
    says so); None when the text has none."""
    found = numbers(text, decimal)
    return found[-1] if found else None
