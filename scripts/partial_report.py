"""Rule partial_report: the dataset and report of the points finished so far, with what is left."""

from quantladder import progress
from quantladder.scriptutil import log, main, mock_from_argv


def run(smk):
    _, html, pend = progress.partial_report(smk.config, smk.wildcards.card)
    log.info("%s\n%s", progress.summary_text(pend), html)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
