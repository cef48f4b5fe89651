"""The metric registry: every figure a measure or benchmark writes is declared here, once.

Producers (measures, benchmarks, the aggregate) write rows only through :func:`row`, which refuses a
metric nobody declared, a unit other than the declared one, or a stderr on a metric declared without
one. Consumers (the dataset view, the report, the recommender, the anchor gate, ``docs/dataset.md``)
read the declarations instead of keeping name lists of their own: a consumer that names an
undeclared metric fails ``tests/test_metrics.py``.

This module imports no producer: each declares its figures when it is imported, and a reader of the
whole registry imports :mod:`quantladder.catalog`, which loads them all (lm-evaluation-harness's
``api/registry.py`` holds what its tasks register and never imports a task).

A declaration says (the shape of lm-evaluation-harness's ``register_metric`` and inspect_ai's
``@scorer(metrics=...)``, with what a quantization study needs besides):

- ``unit``: the unit of ``value`` and ``stderr`` ("1" for a pure number);
- ``higher_is_better``: the direction (None where a figure has none: a count of samples, a hash);
- ``stderr``: ``"se"`` (a standard error of the figure), ``"sd"`` (the standard deviation over
  repetitions, as llama-bench prints), or None (an exact count, a computed size);
- ``whole``: which row stands for the whole set when a metric has subsets — ``"null"`` (the row
  without a subset), ``"only"`` (the metric has one subset per point, a label such as llama-bench's
  ``tg128`` or a probe's name), or ``"none"`` (per-subset figures only; the whole is another metric);
- ``headline_for``: the benchmarks whose readers compare rungs by this figure (the report's curves
  and Pareto fronts, the answer screen);
- ``score_for``: the benchmarks whose recommendation weighs this figure (a % where higher is
  better), at most one per benchmark;
- ``paired``: how a rung is compared with its reference on the same units — ``"items"`` (per-item
  verdicts: exact test on the discordant items), ``"tokens"`` (a per-token figure, paired already), or
  None (no paired comparison: costs, counts);
- ``writers``: the benchmarks or measures allowed to write it (``TASK`` for every task benchmark);
- ``group``: which section of the report shows it (``flips``, ``noise``, ``loops``, ``generation``);
  ``pareto_cost``: a cost axis of the Pareto fronts (1 = its measure's preferred axis, 2 = next, ...).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from .errors import QuantladderError

TASK = "<task>"  # any task benchmark (BFCL, HumanEval, ...): the flips, loops and costs every one has
WHOLE_KINDS = ("null", "only", "none")
STDERR_KINDS = ("se", "sd", None)
PAIRED_KINDS = ("items", "tokens", None)


class MetricError(QuantladderError):
    """A producer wrote a figure the registry does not declare (or not as declared)."""


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str
    writers: tuple[str, ...]
    higher_is_better: bool | None = None
    stderr: str | None = None
    whole: str = "null"
    headline_for: tuple[str, ...] = ()
    score_for: tuple[str, ...] = ()
    paired: str | None = None
    per_item: bool = False  # one row per item (subset = item id): not a figure to plot
    group: str | None = None  # what a consumer draws it with: flips, noise, loops, generation
    pareto_cost: int = 0  # a cost axis of the Pareto fronts: 1 the most preferred of its measure; 0 none
    # read off a clock or a sensor (tokens/s, joules, a sampled peak, seconds): two runs on the same card
    # and config give other values, where every other figure is byte-identical (quantladder.dataset_diff)
    clocked: bool = False

    def __post_init__(self):
        if self.whole not in WHOLE_KINDS:
            raise ValueError(f"metric {self.name}: whole must be one of {WHOLE_KINDS}")
        if self.stderr not in STDERR_KINDS:
            raise ValueError(f"metric {self.name}: stderr must be one of {STDERR_KINDS}")
        if self.paired not in PAIRED_KINDS:
            raise ValueError(f"metric {self.name}: paired must be one of {PAIRED_KINDS}")
        if not self.unit:
            raise ValueError(f"metric {self.name}: a figure needs its unit (use '1' for a pure number)")
        if self.score_for and (self.unit != "%" or self.higher_is_better is not True):
            raise ValueError(f"metric {self.name}: a recommendation score must be a % where higher is better")


_REGISTRY: dict[str, Metric] = {}


def declare(*metrics: Metric) -> tuple[Metric, ...]:
    """Declare metrics (at import of the module that writes them). A name is declared once."""
    for m in metrics:
        old = _REGISTRY.get(m.name)
        if old is not None and old != m:
            raise ValueError(f"metric {m.name!r} is declared twice, differently ({old} vs {m})")
        _REGISTRY[m.name] = m
    return metrics


def registry() -> dict[str, Metric]:
    """Every metric declared so far: all of them once quantladder.catalog is imported."""
    return _REGISTRY


def get(name: str) -> Metric:
    reg = registry()
    try:
        return reg[name]
    except KeyError:
        near = difflib.get_close_matches(name, reg, n=3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise MetricError(f"metric {name!r} is not declared in the metric registry{hint}: declare it "
                          "with quantladder.metrics.declare where it is written") from None


def row(metric: str, value, *, unit: str | None = None, stderr=None, n=None, subset=None, n_ctx=None,
        status: str | None = None, status_reason: str | None = None, interval=None, n_parallel=None) -> dict:
    """One metric row as measures and benchmarks write it in their metrics.json.

    ``unit`` may be given to make a producer's intent explicit; it must equal the declared unit.
    A value of None is a figure that could not be measured: give its status ("absent") and reason.
    ``n_parallel``: the sequences decoded together for this figure where it is the row's own (a speed
    test at B concurrent sequences), over the point's generation setting in the dataset.
    ``interval``: the figure's own 95 % interval where value ± 1.96·stderr is not it — a per-token
    figure's, clustered by chunk (``stats.tokens.TokenMean.to_dict()``: ``ci_low``, ``ci_high``, ``stderr``,
    ``n_chunks``): its ends and the clusters behind them, and the whole record (``interval``: what
    recomputes it at another level, ``TokenMean.at``).
    """
    m = get(metric)
    if unit is not None and unit != m.unit:
        raise MetricError(f"metric {metric}: written in {unit!r}, declared in {m.unit!r}")
    if value is not None and not isinstance(value, (int, float)):
        raise MetricError(f"metric {metric}: value must be a number, got {type(value).__name__}")
    if value is not None and isinstance(value, float) and math.isnan(value):
        raise MetricError(f"metric {metric}: a NaN is not a figure; write None with the reason")
    if isinstance(stderr, float) and math.isnan(stderr):
        stderr = None
    if stderr is not None and m.stderr is None:
        raise MetricError(f"metric {metric}: declared without an uncertainty, written with one")
    if value is None and not status_reason:
        raise MetricError(f"metric {metric}: a figure that could not be measured needs its reason")
    out = {"metric": metric, "value": None if value is None else float(value), "unit": m.unit,
           "stderr": None if stderr is None else float(stderr), "n": None if n is None else int(n),
           "subset": subset, "n_ctx": None if n_ctx is None else int(n_ctx),
           "higher_is_better": m.higher_is_better}
    if n_parallel is not None:
        out["n_parallel"] = int(n_parallel)
    if interval is not None and value is not None and math.isfinite(interval["stderr"]):
        out.update(ci_low=float(interval["ci_low"]), ci_high=float(interval["ci_high"]),
                   n_clusters=int(interval["n_chunks"]), interval=dict(interval))
    if status or value is None:
        out["status"] = status or "absent"
        out["status_reason"] = status_reason
    return out


def headlines(benchmark: str) -> list[str]:
    return [m.name for m in registry().values() if benchmark in m.headline_for]


def score_metric(benchmark: str) -> str | None:
    names = [m.name for m in registry().values() if benchmark in m.score_for]
    return names[0] if names else None


def per_item_metrics() -> set[str]:
    return {m.name for m in registry().values() if m.per_item}


def in_group(group: str) -> list[str]:
    return [m.name for m in registry().values() if m.group == group]


def pareto_costs(benchmark: str) -> list[str]:
    """The cost axes a measure offers, most preferred first."""
    return [m.name for m in sorted(registry().values(), key=lambda m: m.pareto_cost)
            if m.pareto_cost and benchmark in m.writers]


def whole_kind(name: str) -> str:
    m = registry().get(name)
    return m.whole if m else "null"


def markdown() -> str:
    """The metric table of docs/dataset.md, generated from the registry."""
    lines = ["| metric | unit | better | stderr | whole set | written by | headline of | meaning |",
             "|---|---|---|---|---|---|---|---|"]
    for m in sorted(registry().values(), key=lambda m: (m.writers, m.name)):
        better = {True: "higher", False: "lower", None: "—"}[m.higher_is_better]
        se = {"se": "standard error", "sd": "sd over repetitions", None: "—"}[m.stderr]
        whole = {"null": "row without subset", "only": "its one subset", "none": "per subset only"}[m.whole]
        writers = ", ".join("any task" if w == TASK else w for w in m.writers)
        head = ", ".join(m.headline_for) or "—"
        clocked = " (read off a clock or sensor: varies between runs)" if m.clocked else ""
        lines.append(f"| `{m.name}` | {m.unit} | {better} | {se} | {whole} | {writers} | {head} | {m.description}{clocked} |")
    return "\n".join(lines)


# -- The figures every task benchmark shares (the score stage writes them from its verdicts and
# generations). The task benchmarks declare their own in their modules (quantladder/benchmarks/*), the
# measures theirs in theirs (quantladder/measures/*).

declare(
    Metric("error_items", "items", "items failed, by error type (subset; BFCL's, the sandbox's, prompt_too_long)",
           (TASK,), higher_is_better=False, whole="none", group="loops"),
    Metric("degenerate_items", "items", "items whose reply is a repetition loop (quantladder.loops)", (TASK,),
           higher_is_better=False, group="loops"),
    Metric("degenerate_share", "%", "share of items whose reply is a repetition loop", (TASK,),
           higher_is_better=False, group="loops"),
    Metric("generation_items", "items", "items generated, at n_ctx", (TASK,), group="generation"),
    Metric("generation_prompt_tokens", "tokens", "prompt tokens of their requests, at n_ctx", (TASK,),
           group="generation"),
    Metric("generation_reused_prompt_tokens", "tokens",
           "of those, tokens not decoded: cells a continued request kept or the exact prefix cache gave, at n_ctx",
           (TASK,), group="generation"),
    Metric("generation_output_tokens", "tokens", "tokens generated for them, at n_ctx", (TASK,),
           group="generation"),
    Metric("generation_seconds", "s", "wall time the generation loop spent on them, at n_ctx", (TASK,),
           higher_is_better=False, group="generation", clocked=True),
)
