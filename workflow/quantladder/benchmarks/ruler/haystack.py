"""Haystack material for RULER (Hsieh et al. 2024, github.com/NVIDIA/RULER).

RULER fills its contexts from three kinds of text (README, "Customize task complexity"):
``repeat`` (one block of noise sentences over and over), ``essay`` (Paul Graham's essays),
``needle`` (the haystack is made of distractor needles). It draws needle keys and the words of
the aggregation tasks from the ``wonderwords`` lists (adjective-noun pairs; nouns + adjectives
+ verbs). Offline, the essay source defaults to text that ships with Python and, when
``wonderwords`` is not installed, the words come from the same text; which one was used is
recorded with the items, so it enters the data hash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...errors import ConfigError, DataError
from ...models import resolve_source
from ...textsources import file_text, pydoc_topics_text

# RULER's noise block (scripts/data/synthetic/niah.py, type_haystack=repeat; the same block is the
# noise of variable_tracking.py). Kept verbatim: it is the benchmark's data.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."

_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """A plain sentence splitter (RULER uses nltk's punkt; a regex keeps the dependency out and is
    only used to choose needle insertion points between sentences)."""
    return [s for s in _SENT_END.split(text.strip()) if s]


def load_text_source(source: dict) -> str:
    """Essay text from a source dict as in ``corpora``: ``builtin: pydoc-topics`` / path / package / hf
    (quantladder.textsources, below the corpora and the exams alike).

    ``format: json-text`` reads RULER's own ``PaulGrahamEssays.json`` (``{"text": ...}``), so the
    real-run essays can be that file from the hub or a local copy.
    """
    if source.get("format") == "json-text":
        path = Path(resolve_source({k: v for k, v in source.items() if k in ("hf", "path", "package", "file")}))
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return doc["text"] if isinstance(doc, dict) else "\n".join(d["text"] for d in doc)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{path}: not a RULER essay JSON ({{'text': ...}}): {e}") from e
    builtin = source.get("builtin")
    if builtin not in (None, "pydoc-topics"):
        raise ConfigError(f"essay source {source}: the one builtin essay text is pydoc-topics "
                          "(config/schemas/ruler.schema.yaml, text_source)")
    text = pydoc_topics_text() if builtin else file_text(source)
    if not text.strip():
        raise DataError(f"essay source {source} gave no text")
    return text


@dataclass(frozen=True)
class WordLists:
    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]
    common: tuple[str, ...]  # the pool CWE draws from (RULER: nouns + adjectives + verbs)
    source: str

    def key_word(self, rng) -> str:
        """RULER's 'words' needle type: an adjective-noun pair such as 'quiet-harbor'."""
        return f"{rng.choice(self.adjectives)}-{rng.choice(self.nouns)}"


@lru_cache(maxsize=2)
def word_lists(prefer_wonderwords: bool = True) -> WordLists:
    if prefer_wonderwords:
        try:
            from wonderwords import random_word

            nouns = random_word._get_words_from_text_file("nounlist.txt")
            adjs = random_word._get_words_from_text_file("adjectivelist.txt")
            verbs = random_word._get_words_from_text_file("verblist.txt")
            return WordLists(tuple(sorted(set(adjs))), tuple(sorted(set(nouns))),
                             tuple(sorted(set(nouns) | set(adjs) | set(verbs))), "wonderwords")
        except Exception:  # not installed, or its private loader moved: use the offline list
            pass
    vocab = sorted(set(re.findall(r"\b[a-z]{3,12}\b", pydoc_topics_text())))
    # No part-of-speech tags offline: both halves of a key come from the same vocabulary.
    return WordLists(tuple(vocab), tuple(vocab), tuple(vocab), "pydoc-topics-vocabulary")


def essay_words(text: str) -> list[str]:
    """The essay as RULER slices it: whitespace-collapsed, split on single spaces."""
    return re.sub(r"\s+", " ", text).strip().split(" ")
