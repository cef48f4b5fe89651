"""Task benchmarks: one module per exam, each a :class:`Benchmark` registered here by name.

The registry is what the rules, the manifest, the anchor gate and the config check read: a name
that is not here is refused at ``snakemake -n`` with the known names (and a did-you-mean).
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from .base import Benchmark, Item, ScoringContext

__all__ = ["Benchmark", "Item", "ScoringContext", "register", "names", "get", "create"]

_CLASSES: dict[str, type[Benchmark]] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    if cls.name in _CLASSES and _CLASSES[cls.name] is not cls:
        raise ValueError(f"benchmark {cls.name!r} registered twice")
    _CLASSES[cls.name] = cls
    return cls


def names() -> list[str]:
    return sorted(_CLASSES)


def get(name: str, *, where: str = "benchmarks") -> type[Benchmark]:
    try:
        return _CLASSES[name]
    except KeyError:
        near = difflib.get_close_matches(name, _CLASSES, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigError(f"{where}.{name}: no such benchmark (known: {', '.join(names())}){hint}") from None


def create(name: str, section: dict | None = None) -> Benchmark:
    return get(name)(section)


# The exams. Importing them registers their classes and declares their metrics; their heavy
# dependencies (llama.cpp, the sandbox, tree-sitter) load only when a method needs them.
from . import bfcl, code, ruler, tasks  # noqa: E402,F401
