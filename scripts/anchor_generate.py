"""Rule anchor_generate: a task benchmark's anchor models answer its items on this card (GPU host).

Nothing here runs what the models wrote: the replies are scored by rule anchor_gate on the scoring
host. An unreachable model or dataset is recorded as such, and the gate says "unanchored" and why.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import anchors, card  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    task = smk.wildcards.task
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    entries = anchors.load_entries(smk.params.anchors)
    out = anchors.generate(task, entries, ident, smk.config["benchmarks"].get(task),
                           Path("resources") / "anchors" / task)
    write_json(smk.output[0], {"benchmark": task, "spec": smk.params.spec, "entries": out})


main(run, snakemake)
