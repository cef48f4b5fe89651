"""Rule partial_report: the dataset and report of the points finished so far, with what is left."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import progress  # noqa: E402
from quantladder.scriptutil import log, main  # noqa: E402


def run(smk):
    _, html, pend = progress.partial_report(smk.config, smk.wildcards.card)
    log.info("%s\n%s", progress.summary_text(pend), html)


main(run, snakemake)
