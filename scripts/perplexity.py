"""Rule perplexity: one pass (a corpus at a context) of one point: PPL with llama-perplexity's
protocol, KLD / Δp / same-top against the reference rung's stored log-probabilities (identical
tokens), and the share of the evaluation text that the rung's calibration text also holds.

Rule perplexity_point: the point's passes joined into its perplexity/metrics.json (every row keeps
its corpus as subset)."""

import json

from quantladder import budget, points
from quantladder.measures import perplexity as ppl
from quantladder.scriptutil import main, mock_from_argv


def run_pass(smk):
    ppl.measure_pass(points.from_snakemake(smk, "perplexity"), smk.wildcards.corpus, smk.wildcards.ctx,
                     corpus_file=smk.input.corpus, corpus_info=smk.input.corpus_info,
                     reference=smk.input.reference or None, calibration=json.loads(smk.params.calibration),
                     calibration_files=smk.input.calibration, spec=smk.params.spec,
                     deadline=budget.from_snakemake(smk).deadline, metrics_out=smk.output.metrics)


def run_point(smk):
    ppl.join_passes(smk.input.passes, json.loads(smk.params.skipped), spec=smk.params.spec,
                    metrics_out=smk.output.metrics, manifest_out=smk.output.manifest)


def run(smk):
    (run_point if smk.rule == "perplexity_point" else run_pass)(smk)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
