"""Rule report: the self-contained HTML report of one card, from the Parquet dataset alone."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import report  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    report.build(smk.input[0], smk.output[0], card=smk.wildcards.card)


main(run, snakemake)
