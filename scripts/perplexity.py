"""Rule perplexity: one pass (a corpus at a context) of one point: PPL with llama-perplexity's
protocol, KLD / Δp / same-top against the reference rung's stored log-probabilities (identical
tokens), and the share of the evaluation text that the rung's calibration text also holds.

Rule perplexity_point: the point's passes joined into its perplexity/metrics.json (every row keeps
its corpus as subset)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import budget, points  # noqa: E402
from quantladder.measures import perplexity as ppl  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run_pass(smk):
    ppl.measure_pass(points.from_snakemake(smk, "perplexity"), smk.wildcards.corpus, smk.wildcards.ctx,
                     corpus_file=smk.input.corpus, corpus_info=smk.input.corpus_info,
                     reference=smk.input.reference or None, calibration=json.loads(smk.params.calibration),
                     calibration_files=smk.input.calibration, spec=smk.params.spec,
                     deadline=budget.from_snakemake(smk).deadline, metrics_out=smk.output.metrics)


def run_point(smk):
    ppl.join_passes(smk.input.passes, json.loads(smk.params.skipped), spec=smk.params.spec,
                    metrics_out=smk.output.metrics, manifest_out=smk.output.manifest)


main(run_point if snakemake.rule == "perplexity_point" else run_pass, snakemake)
