"""Rule tool_anchor_gate: the harness's perplexity or speed against llama.cpp's own tool on the
family's reference rung, on this card (quantladder.tool_gates; the rule is in docs/ladder.md)."""

import sys

from quantladder import card, llama_tools, tool_gates
from quantladder.io import read_json, verify_sha256, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    ident = card.check_same_card(smk.wildcards.card, smk.config.get("card"))
    tools = llama_tools.load(smk.input.tools)
    record = read_json(smk.input.info)
    verify_sha256(smk.input.gguf, record.get("sha256"), what="reference rung", recorded_in=str(smk.input.info))
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


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
