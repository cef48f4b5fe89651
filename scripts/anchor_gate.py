"""Rule anchor_gate: reproduce a published anchor score on this card, or say why it can't be."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import anchors, card  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    bench = smk.wildcards.benchmark
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    entries = anchors.load_entries(smk.params.anchors)
    result = anchors.evaluate(bench, entries, ident)
    result["spec"] = smk.params.spec
    write_json(smk.output[0], result)


main(run, snakemake)
