"""Rule find: the answer of the walk (docs/find.md): the rung, its memory at the stated context, the
evidence for it and for the rung below, the path walked and what it cost beside the full ladder."""

import sys

from quantladder import find as qfind
from quantladder.io import read_json, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    state = read_json(smk.input.steps[-1])
    result = qfind.answer(state)
    result["card"] = smk.wildcards.card
    result["cost"] = qfind.cost(state, smk.wildcards.card)
    print(qfind.format_text(result), file=sys.stderr)  # the rule's log
    write_json(smk.output[0], result)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
