"""Reading final answers: GSM8K's reference answers and a model's reply, both to an exact number.

- A GSM8K reference solution ends with ``#### <answer>``: the answer is what follows the marker,
  thousands commas removed (the protocol of the GSM8K release, Cobbe et al. 2021,
  github.com/openai/grade-school-math ``dataset.py``; lm-evaluation-harness's ``gsm8k`` task reads it
  with the same marker).
- A reply's answer is its last number (lm-evaluation-harness's ``flexible-extract`` filter of the
  ``gsm8k`` task takes the last match of a number pattern; its exact-match metric then ignores
  commas, ``$`` and a trailing period, which this reading never includes), read as the ``numeric``
  check of a task file reads it (quantladder.benchmarks.tasks.reading): a date is no number, a
  range (``10-12``) is not one number (no answer), ``−7`` with the Unicode minus is −7, and a lone
  comma before other than three digits is a decimal comma (``2,5`` is 2.5). lm-evaluation-harness's
  pattern reads ``10-12`` as −12 and ``2025-03-15`` as −15.

Both are compared as exact rationals (``fractions.Fraction``), so ``18``, ``18.0`` and ``1,800``
against ``1800`` read as the numbers they are; lm-evaluation-harness compares the strings, where
``18.00`` would miss ``18``. That and the reading of ranges, dates and signs above are the
deviations; they credit a reply that is right or refuse one that gives no single number.
"""

from __future__ import annotations

import re
from fractions import Fraction

from ...errors import DataError
from ..tasks import reading  # the project's one reader of a number as people write it

_MARKER = re.compile(r"####\s*(-?[0-9.,]+)")


def parse_number(text: str) -> Fraction | None:
    """A number as written (sign, thousands commas, decimals, exponent) as an exact fraction."""
    try:
        return Fraction(text.replace(",", "").rstrip("."))
    except (ValueError, ZeroDivisionError):
        return None


def reference_answer(solution: str, where: str) -> Fraction:
    """The final answer of a GSM8K solution (after ``####``); a solution without one is bad data."""
    m = _MARKER.search(solution)
    value = parse_number(m.group(1)) if m else None
    if value is None:
        raise DataError(f"{where}: the answer has no '#### <number>' line (GSM8K's final-answer marker)")
    return value


def reply_answer(reply: str) -> Fraction | None:
    """The last number in a reply, or None when it has none (or it is a range: not one number)."""
    num = reading.last_number(reply)
    return None if num is None else num.value


def exact(value: Fraction) -> str:
    """An exact answer as the items file stores it ("18", "-3/4")."""
    return str(value)
