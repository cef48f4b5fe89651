"""Rule report: the self-contained HTML report of one card, from the Parquet dataset alone."""

from quantladder import report
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    report.build(smk.input[0], smk.output[0], card=smk.wildcards.card, finds=list(smk.input.finds))


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
