"""Rule reference_logits: the reference rung's log-probabilities over the perplexity protocol's
scored positions, stored once per (card, family, corpus, context) and reused by every rung."""

from quantladder import budget
from quantladder.measures import perplexity as ppl
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    ppl.reference_pass(smk.config, smk.wildcards.card, smk.wildcards.corpus, smk.wildcards.ctx, gguf=smk.input.gguf,
                       info=smk.input.info, corpus_file=smk.input.corpus,
                       threads=smk.config.get("threads") or smk.threads, spec=smk.params.spec,
                       deadline=budget.from_snakemake(smk).deadline, logits_out=smk.output.logits,
                       info_out=smk.output.info)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
