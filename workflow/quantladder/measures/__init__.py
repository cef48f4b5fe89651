"""Per-point measures: each module of this package declares itself (a :class:`Measure`) and its figures.

A measure is what a point gets besides the task benchmarks (exams declare themselves in
:mod:`quantladder.benchmarks`): perplexity + KLD against the reference rung, speed, memory, energy, and
the teacher-forced fidelity of a task point. Its module says, once, beside the code that measures:

- its figures (:func:`quantladder.metrics.declare`: unit, direction, uncertainty, cost axis);
- its :class:`Measure`: the rules that write it, each with where its jobs run (``host``), what one
  costs before any ran here (``runtime`` per GB of model, ``guess_s``) and how its jobs are grouped
  for timing (``kind``); the engine settings that enter its key beside the point's; what its anchor
  gate ignores; its Pareto cost axis; whether it is anchored and how; whether it needs the node alone.

The readers — the manifest (keys), the anchors (what a measure's gate is), the resources (host,
runtime), the timings and the progress (kinds, guesses), the dataset view and the report (cost axes)
— ask :func:`declared` and keep no list of measures. A new measure is its module here, its script in
``scripts/``, its rule in ``rules/measures.smk``, and its section under ``measures:`` in
``config/config.schema.yaml`` (docs/ARCHITECTURE.md, "Adding a measure"; tests/test_measures_declared.py
builds a toy one from that recipe).

Declarations are found, not listed: :func:`declared` imports every module of this package once
(``pkgutil``), as ``quantladder.catalog`` does for the figures.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

# Where a rule's jobs run (quantladder.resources: the portable `gpu` resource, the Slurm profile's
# partitions); a measure's rules load a model, so they run where the card is unless they say otherwise.
GPU, SANDBOX, CPU, LOCAL = "gpu", "sandbox", "cpu", "local"


@dataclass(frozen=True)
class RuleCost:
    """One rule a measure runs: where its jobs run and what one costs before any finished here.

    ``runtime``: minutes, base + per GB of the model file (a scheduler's limit before a job of the rule
    has been timed; quantladder.resources); None: the rule's runtime is fixed by its rule. ``guess_s``:
    the seconds quantladder.progress counts for a job before one has finished here (SmolLM2-135M on 2
    CPU cores, the default run). ``kind``: the wildcard that groups its jobs by cost (the family's, for
    a point's measure: a 70B costs what a 70B costs), and ``kind_part`` its position among the parts of
    the rule's benchmark file under ``logs/benchmarks/<rule>/`` (quantladder.timings).
    """

    host: str = GPU
    runtime: tuple[float, float] | None = None
    guess_s: float = 60
    kind: str = "family"
    kind_part: int = 1


@dataclass(frozen=True)
class Measure:
    """What the workflow needs to know of a measure, said by its module.

    ``per_point``: a section of ``measures:`` in the config, a target of every point
    (quantladder.targets.measures); False: rows of another target (fidelity: of a task point).
    ``key_engine``: top-level config keys that enter the measure's key besides the point's engine
    settings (speed: ``threads``, which change speed and nothing a quality figure reads).
    ``gate_ignores``: settings its anchor gate does not depend on (a pass's corpus list).
    ``anchor``: why the measure has no published anchor and what checks it instead (the report says it);
    ``tool_gate``: the llama.cpp tool whose figures its anchor gate reproduces on the point's file
    (quantladder.tool_gates), if any. ``cost``: ``(title, lower_is_better)`` where its figures are a
    cost axis of the Pareto fronts (the metric: its figure with the lowest ``pareto_cost``), the axes in
    ``cost_rank`` order (the report's sections and columns).
    ``alone``: its jobs read clocks or power and get the node to themselves.
    """

    name: str
    description: str
    rules: dict[str, RuleCost] = field(default_factory=dict)
    per_point: bool = True
    key_engine: tuple[str, ...] = ()
    gate_ignores: tuple[str, ...] = ()
    anchor: str = ""
    tool_gate: str | None = None
    cost: tuple[str, bool] | None = None
    cost_rank: int = 0
    alone: bool = False

    def __post_init__(self):
        for rule, rc in self.rules.items():
            if rc.host not in (GPU, SANDBOX, CPU, LOCAL):
                raise ValueError(f"measure {self.name}: rule {rule} runs on an unknown host {rc.host!r}")
        if self.per_point and self.name not in self.rules:
            raise ValueError(f"measure {self.name}: a point's measure names its own rule (rules['{self.name}'])")
        if not self.anchor:
            raise ValueError(f"measure {self.name}: say whether it is anchored and how (anchor=...)")


_DECLARED: dict[str, Measure] = {}


def declare(m: Measure) -> Measure:
    """Declare a measure (at import of its module). A name is declared once."""
    old = _DECLARED.get(m.name)
    if old is not None and old != m:
        raise ValueError(f"measure {m.name!r} is declared twice, differently")
    _DECLARED[m.name] = m
    return m


_LOADED = False


def declared() -> dict[str, Measure]:
    """Every measure, its module imported: name -> declaration, in name order."""
    global _LOADED
    if not _LOADED:
        for mod in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{mod.name}")
        _LOADED = True
    return dict(sorted(_DECLARED.items()))


def get(name: str) -> Measure | None:
    return declared().get(name)


def point_measures() -> tuple[str, ...]:
    """The names of the measures a point takes (sections of ``measures:``)."""
    return tuple(n for n, m in declared().items() if m.per_point)


def rules() -> dict[str, RuleCost]:
    """Every measure's rules: rule -> its host and cost."""
    out: dict[str, RuleCost] = {}
    for m in declared().values():
        for rule, rc in m.rules.items():
            if rule in out and out[rule] != rc:
                raise ValueError(f"rule {rule} is declared by two measures, differently")
            out[rule] = rc
    return out


def cost_axes() -> list[tuple[str, str, bool]]:
    """The Pareto fronts' cost axes: (measure, title, lower is better), in their ``cost_rank`` order."""
    costs = sorted((m.cost_rank, n) for n, m in declared().items() if m.cost)
    return [(n, *declared()[n].cost) for _, n in costs]


def cost_measures() -> tuple[str, ...]:
    """The measures whose figures are costs, not quality (memory, speed, energy), in ``cost_rank`` order."""
    return tuple(n for n, _, _ in cost_axes())
