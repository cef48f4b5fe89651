"""Task benchmarks: one module per exam, each a :class:`Benchmark` listed here by name.

This list is what the rules, the manifest, the anchor gate and the config check read: a name that is
not here is refused at ``snakemake -n`` with the known names (and a did-you-mean). A new exam is a
module under this package and one entry below.
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from .arithmetic import Arithmetic
from .base import Benchmark, Item, ScoringContext
from .bfcl import BFCL
from .bfcl_haystack import BFCLHaystack
from .code import BigCodeBenchHard, HumanEval
from .instructions import IFBench, IFEval
from .ruler import Ruler
from .tasks import Tasks
from .traffic import Traffic

__all__ = ["Benchmark", "Item", "ScoringContext", "names", "get", "create", "configured"]

# Importing the exams declares their metrics; their heavy dependencies (llama.cpp, tree-sitter,
# numpy) and what runs model-written code (the sandbox, the code scorer) load only when a method
# needs them.
_CLASSES: dict[str, type[Benchmark]] = {cls.name: cls for cls in (BFCL, BFCLHaystack, HumanEval, BigCodeBenchHard, Ruler,
                                                                  Tasks, Arithmetic, IFBench, IFEval, Traffic)}


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


def configured(cfg: dict, name: str) -> Benchmark:
    """The benchmark as the config's ``benchmarks.<name>`` section sets it. Not cached: making one is a
    dict merge, cheaper than any cache key of its section."""
    return create(name, (cfg.get("benchmarks") or {}).get(name, {}))
