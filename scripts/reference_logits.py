"""Rule reference_logits: the reference rung's log-probabilities over the perplexity protocol's
scored positions, stored once per (card, family, corpus, n_ctx) and reused by every rung."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import card  # noqa: E402
from quantladder.engine import RawContext  # noqa: E402
from quantladder.io import read_json, sha256_file, write_json  # noqa: E402
from quantladder.measures import perplexity as ppl  # noqa: E402
from quantladder import budget  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    cfg = smk.config
    card.check_same_card(smk.wildcards.card, cfg.get("card"))
    settings = cfg["measures"]["perplexity"]
    proto = ppl.Protocol(n_ctx=int(smk.wildcards.n_ctx), n_batch=settings["n_batch"], max_chunks=settings["max_chunks"])
    text = Path(smk.input.corpus).read_text(encoding="utf-8")
    ref = read_json(smk.input.info)
    header = {"model_sha256": ref["sha256"], "corpus_sha256": sha256_file(smk.input.corpus), "kv": "f16"}
    threads = cfg.get("threads") or smk.threads
    with RawContext(smk.input.gguf, n_ctx=proto.n_seq * proto.n_ctx, n_batch=proto.n_seq * proto.n_ctx,
                    n_seq_max=proto.n_seq, kv="f16", n_threads=threads,
                    n_gpu_layers=cfg.get("gpu_layers", 0), flash_attn=cfg.get("flash_attn")) as ctx:
        res = ppl.run(ctx, text, proto, write_reference=smk.output.logits, ref_header=header,
                      deadline=budget.from_snakemake(smk).deadline,
                      checkpoint=ppl.checkpoint_path(smk.output.logits), resume_key=smk.params.spec)
    s = ppl.summarize(res)
    write_json(smk.output.info, {**header, "ppl": s["ppl"], "ppl_err": s["ppl_err"], "n_tokens": s["n_tokens"],
                                 "n_chunks": s["n_chunks"], "seconds": res["seconds"],
                                 "bytes": Path(smk.output.logits).stat().st_size,
                                 "tokens_sha256": res["tokens_sha256"], "spec": smk.params.spec})


main(run, snakemake)
