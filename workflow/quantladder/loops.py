"""Degenerate-repetition detection: the seeds saw KV-cache quantization turn 101 of 148 answers
into loops. A generation is flagged when its tail is dominated by one repeated n-gram."""

from __future__ import annotations

from collections import Counter

TAIL_TOKENS = 200  # words looked at, from the end
NGRAM = 4
THRESHOLD = 0.5  # share of the tail's n-grams that are copies of its most common one


def repeated_ngram_share(text: str, n: int = NGRAM, tail: int = TAIL_TOKENS) -> float:
    """Share of the tail's n-grams that repeat an earlier n-gram in that tail (0 = none, →1 = loop).

    Words are whitespace-split; a text with no spaces (a run of symbols) is split into characters,
    so "aaaa..." and "}}}}..." loops are seen too.
    """
    words = text.split()
    if len(words) < 2 * n and len(text) >= 2 * n * 4:
        words = list(text.replace(" ", ""))
    words = words[-tail:]
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 2 * n:
        return 0.0
    counts = Counter(grams)
    repeats = sum(c - 1 for c in counts.values())
    return repeats / len(grams)


def is_degenerate(text: str, n_gen_tokens: int | None = None, finish_reason: str | None = None,
                  threshold: float = THRESHOLD) -> bool:
    """A loop: a high repeated-n-gram share over the tail of a long enough generation."""
    return repeated_ngram_share(text) >= threshold
