"""The offline arithmetic set: items made from a seed, answers computed exactly (Python integers).

Two kinds at four graded levels (a level adds one operation, or one step of a word problem):

| kind  | level 1           | level 2            | level 3                   | level 4                         |
|-------|-------------------|--------------------|---------------------------|---------------------------------|
| plain | a + b (one digit) | a ± b (two digits) | a × b ± c (2×2 digits, 3) | a × b − c × d (3×2, 2×2 digits) |
| word  | 1 step            | 2 steps            | 3 steps                   | 4 steps (one exact division)    |

The same (seed, kinds, levels, per_level) always gives the same items: a generator of its own
(``random.Random`` seeded from a string, which Python keeps stable across versions) per (kind,
level), so adding a level does not change the items of another. ``GENERATOR_VERSION`` is in the items
key: bump it when an item would come out different.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

GENERATOR_VERSION = "arith-gen-2"
KINDS = ("plain", "word")
LEVELS = (1, 2, 3, 4)

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena")
_THINGS = ("pencils", "stickers", "marbles", "cookies", "stamps", "cards")


@dataclass(frozen=True)
class Problem:
    id: str
    subset: str  # "<kind>-<level>"
    question: str
    answer: int
    steps: int  # operations the answer takes


def _plain(rng: random.Random, level: int) -> tuple[str, int, int]:
    if level == 1:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        return f"What is {a} + {b}?", a + b, 1
    if level == 2:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if rng.random() < 0.5:
            return f"What is {a} + {b}?", a + b, 1
        a, b = max(a, b), min(a, b)
        return f"What is {a} - {b}?", a - b, 1
    if level == 3:
        a, b, c = rng.randint(12, 99), rng.randint(12, 99), rng.randint(100, 999)
        if rng.random() < 0.5:
            return f"What is {a} * {b} + {c}?", a * b + c, 2
        return f"What is {a} * {b} - {c}?", a * b - c, 2
    a, b, c, d = rng.randint(100, 999), rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99)
    return f"What is {a} * {b} - {c} * {d}?", a * b - c * d, 3


def _word(rng: random.Random, level: int) -> tuple[str, int, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    t = rng.randrange(2)
    if level == 1:
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        if t == 0:
            return f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", a + b, 1
        a, b = max(a, b) + 1, min(a, b)
        return f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?", a - b, 1
    if level == 2:
        if t == 0:
            a, b = rng.randint(3, 12), rng.randint(4, 25)
            c = rng.randint(1, a * b - 1)
            return (f"{name} buys {a} packs of {thing} with {b} {thing} in each pack, then gives away {c} {thing}. "
                    f"How many {thing} does {name} have now?", a * b - c, 2)
        a = rng.randint(20, 60)
        b, c = rng.randint(1, a - 1), rng.randint(1, 40)
        return (f"A bus has {a} passengers. At the first stop {b} passengers get off and {c} get on. "
                "How many passengers are on the bus now?", a - b + c, 2)
    if level == 3:
        if t == 0:
            a, b, c = rng.randint(8, 30), rng.randint(2, 9), rng.randint(2, 7)
            d = rng.randint(1, a * b * c - 1)
            return (f"{name} earns {a} dollars an hour, works {b} hours a day for {c} days, then spends {d} "
                    f"dollars. How many dollars does {name} have left?", a * b * c - d, 3)
        a, b, c, d = rng.randint(4, 20), rng.randint(10, 40), rng.randint(2, 9), rng.randint(6, 24)
        return (f"A library has {a} shelves with {b} books on each. It buys {c} boxes with {d} books in each box. "
                "How many books does the library have now?", a * b + c * d, 3)
    if t == 0:
        a, b, size, k = rng.randint(3, 12), rng.randint(4, 15), rng.choice((4, 5, 6, 8, 10, 12)), rng.randint(2, 9)
        apples = size * k  # per tree: a multiple of the bag size, so the division is exact
        bags = a * b * k
        e = rng.randint(1, bags - 1)
        return (f"A farm has {a} rows of {b} apple trees. Each tree gives {apples} apples. The apples are packed "
                f"in bags of {size}, and {e} bags are sold. How many bags are left?", bags - e, 4)
    b, c, d, e = rng.randint(2, 9), rng.randint(5, 30), rng.randint(2, 12), rng.randint(1, 6)
    a = b * c + d * e + rng.randint(1, 200)
    f = rng.randint(1, 50)
    return (f"{name} has {a} dollars, buys {b} books at {c} dollars each and {d} pens at {e} dollars each, then "
            f"gets {f} dollars back from a friend. How many dollars does {name} have now?", a - b * c - d * e + f, 4)


_MAKERS = {"plain": _plain, "word": _word}


def problems(seed: int, kinds=KINDS, levels=LEVELS, per_level: int = 2) -> list[Problem]:
    """``per_level`` problems of each (kind, level), in kind, level, index order."""
    out = []
    for kind in kinds:
        for level in levels:
            rng = random.Random(f"{GENERATOR_VERSION}:{seed}:{kind}:{level}")
            for i in range(per_level):
                question, answer, steps = _MAKERS[kind](rng, level)
                out.append(Problem(f"{kind}-{level}-{i:03d}", f"{kind}-{level}", question, answer, steps))
    return out
