"""Rule anchor_gate: reproduce a published anchor score on this card, or say why it can't be.

For a task benchmark the replies come from rule anchor_generate; they are scored here (the scoring
host: a code benchmark's tests run in the sandbox) and compared with the published score."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import anchors, card  # noqa: E402
from quantladder.io import read_json, write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    bench = smk.wildcards.benchmark
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    entries = anchors.load_entries(smk.params.anchors)
    generated = read_json(smk.input.generated)["entries"] if smk.input.get("generated") else None
    result = anchors.evaluate(bench, entries, ident, generated=generated,
                              section=smk.config["benchmarks"].get(bench))
    result["spec"] = smk.params.spec
    write_json(smk.output[0], result)


main(run, snakemake)
