"""Rule anchor_gate: reproduce a published anchor score on this card, or say why it can't be.

For a task benchmark the replies come from rule anchor_generate; they are scored here (the scoring
host: a code benchmark's tests run in the sandbox) and compared with the published score."""

from quantladder import anchors, card
from quantladder.io import read_json, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    bench = smk.wildcards.benchmark
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    entries = anchors.load_entries(smk.params.anchors)
    generated = read_json(smk.input.generated)["entries"] if smk.input.get("generated") else None
    result = anchors.evaluate(bench, entries, ident, generated=generated,
                              section=smk.config["benchmarks"].get(bench))
    result["spec"] = smk.params.spec
    write_json(smk.output[0], result)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
