"""Rule anchor_generate: a task benchmark's anchor models answer its items on this card (GPU host).

Nothing here runs what the models wrote: the replies are scored by rule anchor_gate on the scoring
host. An unreachable model or dataset is recorded as such, and the gate says "unanchored" and why.
"""

from pathlib import Path

from quantladder import anchors, card
from quantladder.io import write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    task = smk.wildcards.task
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    entries = anchors.load_entries(smk.params.anchors)
    out = anchors.generate(task, entries, ident, smk.config["benchmarks"].get(task),
                           Path("resources") / "anchors" / task)
    write_json(smk.output[0], {"benchmark": task, "spec": smk.params.spec, "entries": out})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
