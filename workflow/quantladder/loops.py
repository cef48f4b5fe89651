"""Degenerate-repetition detection: the seeds saw KV-cache quantization turn 101 of 148 answers
into loops. A generation is flagged when its tail is dominated by repeated n-grams.

The measure is the share of the tail's n-grams that are copies of an n-gram seen earlier in the
tail: a loop of any period p (shorter than the tail) pushes it towards 1 - p/len, while prose, a
numbered list or a list of distinct values stays near 0. Tokens are compared case- and
punctuation-insensitively, so "is: 42." and "is: 42," count as the same step of a loop.
"""

from __future__ import annotations

import re
from collections import Counter

TAIL_TOKENS = 200  # words looked at, from the end
NGRAM = 4
THRESHOLD = 0.5  # share of the tail's n-grams that repeat an earlier one
# A generation cut by the token budget (finish_reason "length") that is already this repetitive is
# a loop too: loops run until the budget stops them, answers usually stop on their own.
THRESHOLD_AT_LIMIT = 0.3

_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")
_NUMBER = re.compile(r"^[\d.,:#-]+$")


def _units(text: str, n: int) -> list[str]:
    """Whitespace words, normalised; a text with (almost) no spaces is split into characters, so
    "aaaa..." and "}}}}..." loops are seen too."""
    words = text.split()
    if len(words) < 2 * n and len(text) >= 2 * n * 4:
        return list(text.replace(" ", ""))
    out = []
    for w in words:
        core = _PUNCT.sub("", w.lower())
        out.append(core or w)  # a word that is all punctuation ("...", "}}") stays itself
    return out


def _share(words: list[str], n: int) -> float:
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 2 * n:
        return 0.0
    counts = Counter(grams)
    repeats = sum(c - 1 for c in counts.values())
    return repeats / len(grams)


def repeated_ngram_share(text: str, n: int = NGRAM, tail: int = TAIL_TOKENS) -> float:
    """Share of the tail's n-grams that repeat an earlier n-gram in that tail (0 = none, ->1 = loop).

    A loop with a counter in it ("1. building 2. building 3. building ...", seen from SmolLM2 on
    RULER's cwe) has no repeated n-gram while the numbers change, so the share is also taken with
    the bare numbers left out, and the larger of the two counts. A list of distinct values has
    nothing left once its numbers are out, so it is not taken for a loop.
    """
    words = _units(text, n)[-tail:]
    words_only = [w for w in words if not _NUMBER.match(w)]
    return max(_share(words, n), _share(words_only, n))


def is_degenerate(text: str, n_gen_tokens: int | None = None, finish_reason: str | None = None,
                  threshold: float = THRESHOLD) -> bool:
    """A loop: a high repeated-n-gram share over the tail of a long enough generation.

    With ``finish_reason == "length"`` the bar is lower (THRESHOLD_AT_LIMIT), never higher than
    ``threshold``.
    """
    share = repeated_ngram_share(text)
    if finish_reason == "length":
        return share >= min(threshold, THRESHOLD_AT_LIMIT)
    return share >= threshold
