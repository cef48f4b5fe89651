"""Rule ruler_items: RULER items for one family, fitted to each length in the family's own tokens.

The items depend on the tokenizer and chat template only, so every rung and KV type of the family
answers the very same prompts; their sha256 enters each point's manifest.
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder.benchmarks import ruler  # noqa: E402
from quantladder.benchmarks.ruler import build, haystack  # noqa: E402
from quantladder.benchmarks.ruler import qa as ruler_qa  # noqa: E402
from quantladder.engine import Engine, EngineSettings  # noqa: E402
from quantladder.io import atomic_path, read_json, sha256_file  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    s = ruler.resolve_settings(smk.config["benchmarks"].get("ruler"))
    fam = smk.config["families"][smk.wildcards.family]
    record = read_json(smk.input.info)
    n_ctx_train = int(record["info"].get("n_ctx_train") or 0)
    lengths, dropped, note = build.cap_lengths(s["lengths"], n_ctx_train, s["cap_to_trained_context"])
    log = logging.getLogger("quantladder.ruler")
    if note:
        log.warning("ruler: %s", note)
    words = haystack.word_lists()
    needs_essay = any(ruler.TASKS[t].args.get("type_haystack") == "essay" for t in s["tasks"])
    essay = haystack.essay_words(haystack.load_text_source(s["essay"])) if needs_essay else None
    qa_data, qa_files = {}, {}
    for name in sorted({ruler.TASKS[t].args["dataset"] for t in s["tasks"] if ruler.TASKS[t].kind == "qa"}):
        qa_data[name], path = ruler_qa.load(name, s["qa"][name])
        qa_files[name] = {"source": s["qa"][name], "sha256": sha256_file(path)}
    # Only the tokenizer and chat template are used: a small context, no GPU.
    with Engine(smk.input.gguf, EngineSettings(n_ctx=512, n_gpu_layers=0, n_threads=smk.threads)) as eng:
        fmt = build.PromptFormat(eng, chat=bool(fam.get("chat", True)))
        with atomic_path(smk.output.item_file) as tmp:
            build.build_items(fmt=fmt, tasks=s["tasks"], lengths=lengths, n_samples=s["samples"], seed=s["seed"],
                              words=words, essay=essay, qa=qa_data, out_path=tmp, log=log)
    build.write_items_meta(smk.output.meta, smk.output.item_file, {
        "name": "ruler", "version": ruler.RULER_VERSION, "tasks": s["tasks"], "lengths": lengths,
        "lengths_dropped": dropped, "lengths_note": note, "n_ctx_train": n_ctx_train, "samples": s["samples"],
        "seed": s["seed"], "essay_source": s["essay"] if needs_essay else None, "word_source": words.source,
        "qa": qa_files, "chat": bool(fam.get("chat", True)), "tokenizer_gguf_sha256": record.get("sha256"),
    })


main(run, snakemake)
