"""Rule benchmark_items: a task benchmark's items for one family, fixed and ordered.

Items depend on the data and the item settings only (RULER's also on the family's tokenizer and chat
template, read from the reference rung), so every rung and KV type of the family answers the very
same items; the file's sha256 enters each point's manifest.
"""

import json
import logging

from quantladder import benchmarks, reasoning
from quantladder.io import JsonlFile, read_json, sha256_file, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    task, family = smk.wildcards.task, smk.wildcards.family
    bench = benchmarks.configured(smk.config, task)
    bench.expect(json.loads(smk.params.digests))  # the file as planned, or nothing is built from it
    source = read_json(smk.input.source)
    bench.verify_source(source, str(smk.input.source))
    log = logging.getLogger(f"quantladder.{task}")
    # the family as its replies are made: the run's reasoning keys with its own over them (RULER's room
    # for the thinking), as the items key holds them (manifest.items_key)
    fam = {**smk.config["families"][family], "reasoning": reasoning.items_reasoning(smk.config, family)}
    items, facts = bench.build_items(source, reference_gguf=str(smk.input.gguf), family=fam, threads=smk.threads,
                                     log=log)
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{task}: item ids are not unique")
    JsonlFile(smk.output.item_file).write([it.to_json() for it in items])
    reference = read_json(smk.input.info)
    write_json(smk.output.meta, {
        "benchmark": task, "family": family, "version": bench.version, "key": smk.params.key,
        "n_items": len(items), "sha256": sha256_file(smk.output.item_file), "settings": bench.group("items"),
        "source": {k: source.get(k) for k in ("name", "version", "sha256")},
        "tokenizer_gguf_sha256": reference.get("sha256") if bench.per_family_items else None, **facts,
    })
    log.info("%s items for %s: %d", task, family, len(items))


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
