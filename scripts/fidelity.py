"""Rules reply_logits and fidelity: teacher-forced fidelity of a task point against the reference
rung's own replies (quantladder.measures.fidelity).

reply_logits: the reference rung through its replies, its log-probs stored once per (card, family, benchmark).
fidelity: one point's first divergence, length and loop change, and its KLD / same-top on those replies."""

from quantladder import budget, points
from quantladder.measures import fidelity
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    deadline = budget.from_snakemake(smk).deadline
    if smk.rule == "reply_logits":
        fidelity.reference_job(smk.config, smk.wildcards.card, gguf=smk.input.gguf, info=smk.input.info,
                               generations=smk.input.generations, threads=smk.config.get("threads") or smk.threads,
                               spec=smk.params.spec, deadline=deadline, logits_out=smk.output.logits,
                               info_out=smk.output.info)
        return
    fidelity.point_job(points.from_snakemake(smk), reference_logits=smk.input.reference,
                       reference_info=smk.input.reference_info, reference_generations=smk.input.reference_generations,
                       generations=smk.input.generations, deadline=deadline, metrics_out=smk.output.metrics)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
