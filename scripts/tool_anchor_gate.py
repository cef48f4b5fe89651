"""Rule tool_anchor_gate: the harness's perplexity or speed against llama.cpp's own tool on the
family's reference rung, on this card (quantladder.tool_gates; the rule is in docs/ladder.md)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import card, llama_tools, tool_gates  # noqa: E402
from quantladder.io import read_json, write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    tools = llama_tools.load(smk.input.tools)
    record = read_json(smk.input.info)
    threads = int(smk.config.get("threads") or smk.threads)
    kw = dict(family=smk.wildcards.family, card_label=ident.get("label"), tools=tools, model=smk.input.gguf,
              model_record=record, threads=threads, spec=smk.params.spec)
    if smk.wildcards.benchmark == "perplexity":
        doc = tool_gates.perplexity_gate(smk.config, corpus=smk.input.corpus, **kw)
    else:
        doc = tool_gates.speed_gate(smk.config, **kw)
    print(f"{smk.wildcards.benchmark} gate for {smk.wildcards.family}: {doc['status']}"
          + (f" ({doc['reason']})" if doc.get("reason") else ""), file=sys.stderr)
    write_json(smk.output[0], doc)


main(run, snakemake)
