"""The HTML report: one self-contained file per card, rebuilt from the Parquet dataset alone.

``build(points_parquet, out_html, card=None)`` reads ``points.parquet`` and nothing else, and
writes one HTML file with inline SVG plots (matplotlib, text kept as text) and no external
JS/CSS. Each card opens with **the answer**, on one screen and without plots (report.answer): per
family and rung the headline figures, their paired deltas against the reference with 95 % intervals
and verdicts, the noise floor, the items a 2-point loss needs, the recommendation at common memory
budgets and the findings about importance matrices (report.matrix_findings). Below: status of every
benchmark (anchor gate), flips beside the noise floor, then, folded, each family's rungs as made, the
plots (report.figures, report.pareto) — where a figure that does not vary is one line instead of a
plot — every figure's table with its paired Δ (report.family), degenerate loops, manifests
(report.tables), and — when the dataset holds other cards — the cross-card view (report.crosscard),
which never mixes cards into one curve. One table of sections (report.page.SECTIONS) yields both the
contents and the headings.
"""

from .crosscard import identical_generations
from .matrix_findings import findings
from .markup import fmt_delta
from .page import build, render
from .pareto import pareto_front

__all__ = ["build", "fmt_delta", "findings", "identical_generations", "pareto_front", "render"]
