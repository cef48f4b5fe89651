"""The catalog: every module that declares figures, loaded, so that the metric registry is whole.

The registry (:mod:`quantladder.metrics`) stands on the ground floor and imports none of the modules
that declare into it; this one stands above them all and imports them for the readers (the dataset
view, and through it the report and the recommender; ``docs/dataset.md``). The measures' figures and
the ones every task shares are declared in the registry module itself.
"""

from __future__ import annotations

# Each declares its figures at import: the task benchmarks their scores, flips the verdict changes
# and reply hashes, deltas the items a run needs, thinking a thinking family's thinking; the measures
# theirs (perplexity, speed, memory, energy, and fidelity the teacher-forced rows of task points),
# every one of them found and imported by measures.declared.
from . import benchmarks, deltas, flips, measures, thinking  # noqa: F401

measures.declared()
