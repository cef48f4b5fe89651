"""Numbers and choices read the way a person reads them (issue 41, case 8): the `numeric` and `choice`
checks of a task file (quantladder.benchmarks.tasks.checks, .reading) and the arithmetic benchmark's
answers, which share the number reader. Each row is a reply and what a person reads in it; the rows
that read wrongly before (a range as a negative number, a date as one, a decimal comma as two
numbers, the Unicode minus dropped, the article "a" as option A) sit beside rows that must keep
working."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from quantladder.benchmarks.arithmetic import answers
from quantladder.benchmarks.tasks import checks as C
from quantladder.benchmarks.tasks import reading
from quantladder.errors import DataError

REPO = Path(__file__).resolve().parents[1]
RANGE = "range"  # the reply's last number is a range: not one number

# reply, decimal setting, what a person reads as the reply's number (None: no number at all)
NUMBERS = [
    # read wrongly before
    ("10-20 minutes", "auto", RANGE),
    ("It takes 10–20 minutes.", "auto", RANGE),  # en dash
    ("between 3 - 5 hours", "auto", RANGE),
    ("2025-03-15", "auto", None),
    ("The deadline is 2025-03-15.", "auto", None),
    ("On 2025-03-15 it rained 12 mm.", "auto", 12),
    ("Paid on 15/03/2025: 40 euros", "auto", 40),
    ("Due 03-15-2025", "auto", None),
    ("15.03.2025", "auto", None),
    ("It shipped on March 15, 2025.", "auto", None),
    ("It shipped on 15 March 2025, 3 boxes", "auto", 3),
    ("Son 6,2 millas.", "auto", Fraction("6.2")),
    ("Son 6,2 millas.", "comma", Fraction("6.2")),
    ("pi es 3,14159", "auto", Fraction("3.14159")),
    ("Cuesta 1.234,50 euros", "auto", Fraction("1234.5")),
    ("Cuesta 1.234,50 euros", "comma", Fraction("1234.5")),
    ("1,250 kg", "comma", Fraction("1.25")),
    ("3.000 habitantes", "comma", 3000),
    ("−40 °F", "auto", -40),  # U+2212 MINUS SIGN
    ("It was −3.5 degrees", "auto", Fraction("-3.5")),
    ("(−7)", "auto", -7),
    ("x = －2", "auto", -2),  # full-width hyphen-minus
    ("COVID-19", "auto", 19),  # a hyphen after a letter joins, it is no sign
    # must keep working
    ("4 boxes of 12 make 48.", "auto", 48),
    ("It costs $1,234.50", "auto", Fraction("1234.5")),
    ("1,234", "auto", 1234),
    ("1,234,567 people", "auto", 1234567),
    ("1.234.567", "auto", 1234567),
    ("x = -3", "auto", -3),
    ("The answer is -7", "auto", -7),
    ("temperature -40", "auto", -40),
    ("+5", "auto", 5),
    ("3.1416", "auto", Fraction("3.1416")),
    (".5 cups", "auto", Fraction("0.5")),
    ("18.00", "auto", 18),
    ("1e5", "auto", 100000),
    ("2.5e-3", "auto", Fraction("0.0025")),
    ("5 - 3 = 2", "auto", 2),  # the subtraction's result, after "="
    ("10-20 minutes, so about 15", "auto", 15),  # a range followed by the answer
    ("1,2,3", "auto", 3),  # a list written without spaces
    ("6,2", "point", 2),  # `point`: a comma is no decimal mark, so two numbers
    ("version 1.2.3 fixed 4 bugs", "auto", 4),
    ("no numbers here", "auto", None),
]


def _want_value(want):
    return None if want in (None, RANGE) else Fraction(want)


@pytest.mark.parametrize("reply, decimal, want", NUMBERS, ids=[f"{r}|{d}" for r, d, _ in NUMBERS])
def test_the_number_a_person_reads(reply, decimal, want):
    got = reading.last_number(reply, decimal)
    if want is None:
        assert got is None, got
    elif want == RANGE:
        assert got is not None and got.value is None and "a range" in got.why, got
    else:
        assert got is not None and got.value == Fraction(want), got


@pytest.mark.parametrize("reply, decimal, want", NUMBERS, ids=[f"{r}|{d}" for r, d, _ in NUMBERS])
def test_the_numeric_check_reads_the_same(reply, decimal, want):
    """The check passes on the number a person reads, and on no other (its negation, its neighbour)."""
    spec = {"kind": "numeric", "value": 0, **({"decimal": decimal} if decimal != "auto" else {})}
    value = _want_value(want)
    candidates = [value] if value is not None else []
    candidates += [Fraction(-20), Fraction(-15), Fraction(2), Fraction(40), Fraction(20), Fraction(-1234)]
    for v in candidates:
        c = C.parse("t.jsonl:1: field 'checks[0]'", {**spec, "value": float(v)}, {}, REPO)
        passed, detail = C.run(c, reply, None)
        assert passed == (v == value), (v, detail)
    if want == RANGE:
        c = C.parse("t.jsonl:1: field 'checks[0]'", {**spec, "value": 15}, {}, REPO)
        assert C.run(c, reply, None) == (False, f"read {reading.last_number(reply).why}, want 15")


@pytest.mark.parametrize("reply, decimal, want", [r for r in NUMBERS if r[1] == "auto"],
                         ids=[r for r, d, _ in NUMBERS if d == "auto"])
def test_the_arithmetic_answer_reads_the_same(reply, decimal, want):
    assert answers.reply_answer(reply) == _want_value(want)


def test_a_pattern_reads_its_match_the_same_way():
    spec = {"kind": "numeric", "value": -40, "pattern": r"Answer:\s*(.+)"}
    c = C.parse("t.jsonl:1: field 'checks[0]'", spec, {}, REPO)
    assert C.run(c, "It was 3 below. Answer: −40 °F", None)[0]
    c = C.parse("t.jsonl:1: field 'checks[0]'", {**spec, "value": 6.2, "decimal": "comma"}, {}, REPO)
    assert C.run(c, "Son 10 km. Answer: 6,2 millas", None)[0]


def test_the_decimal_option_is_checked():
    with pytest.raises(DataError, match=r"t\.jsonl:1: field 'checks\[0\]': numeric\.decimal: one of auto, point, "
                                        r"comma .*got 'komma'"):
        C.parse("t.jsonl:1: field 'checks[0]'", {"kind": "numeric", "value": 1, "decimal": "komma"}, {}, REPO)


OPTIONS = ["perplexity", "Kullback-Leibler divergence", "accuracy", "entropy"]
# reply, the option a person reads in it (index; None: no choice)
CHOICES = [
    # read wrongly before: the article "a" was option A
    ("The answer is a Kullback-Leibler divergence", 1),
    ("the answer is a measure of accuracy", 2),
    ("The answer is a number, not a letter", None),
    ("Answer is an entropy", 3),
    # labels, which must keep working
    ("A", 0), ("(A)", 0), ("A)", 0), ("A.", 0), ("A: perplexity", 0), ("**B**", 1), ("(b)", 1), ("b) KL", 1),
    ("B. Kullback-Leibler divergence", 1),
    ("The answer is B.", 1), ("The answer is (c)", 2), ("answer: D", 3), ("Answer: b", 1), ("Answer - C", 2),
    ("I think the answer is C because it counts correct replies", 2),
    ("The correct answer is D", 3),
    ("option C", 2), ("I pick option B.", 1), ("choice (d)", 3),
    ("Option A is wrong; option C is right", None),  # two options named: no choice by letter
    # the option's text
    ("It is the entropy.", 3),
    ("A lot of people would say entropy", 3),  # "A" opening a sentence is an article, not a label
    ("perplexity or accuracy", None),  # two options' texts: no choice
    ("E", None),  # no such option
    ("I'd say B", None),  # a letter in running text is no label
]


@pytest.mark.parametrize("reply, want", CHOICES, ids=[c[0] for c in CHOICES])
def test_the_choice_a_person_reads(reply, want):
    assert C.read_choice(reply, OPTIONS) == want
    for answer in range(len(OPTIONS)):
        c = C.parse("t.jsonl:1: field 'checks[0]'", {"kind": "choice", "answer": chr(65 + answer)},
                    {"options": OPTIONS}, REPO)
        assert C.run(c, reply, tuple(OPTIONS))[0] == (answer == want)


@pytest.mark.parametrize("reply", ["9" * 5000, "so 1e999999999", "7 then " + "1," * 3000 + "2"],
                         ids=["5000_digits", "huge_exponent", "long_list"])
def test_a_degenerate_run_of_digits_has_no_value_and_no_crash(reply):
    """Python reads at most 4,300 digits into an int (and 10**999999999 does not end): a degenerate
    reply's digits are the last number, with no value, in a moment."""
    got = reading.last_number(reply)
    assert got.value is None and "past what is read as one" in got.why
    assert answers.reply_answer(reply) is None
    c = C.parse("t.jsonl:1: field 'checks[0]'", {"kind": "numeric", "value": 7}, {}, REPO)
    assert C.run(c, reply, None)[0] is False
