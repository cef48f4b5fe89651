"""Rule reference_logits: the reference rung's log-probabilities over the perplexity protocol's
scored positions, stored once per (card, family, corpus, context) and reused by every rung."""

from pathlib import Path

from quantladder import budget, card, corpora
from quantladder.engine import RawContext
from quantladder.io import read_json, sha256_file, write_json
from quantladder.measures import perplexity as ppl
from quantladder.measures.memory import peak_rss_bytes
from quantladder.scriptutil import log, main, mock_from_argv


def run(smk):
    cfg = smk.config
    card.check_same_card(smk.wildcards.card, cfg.get("card"))
    settings = ppl.pass_settings(cfg, smk.wildcards.corpus, smk.wildcards.ctx)
    ref = read_json(smk.input.info)
    proto = ppl.protocol(settings, (ref.get("info") or ref).get("n_ctx_train"), source=str(smk.input.gguf))
    kind = "chat" if corpora.is_chat(settings["source"]) else "text"
    text, parse_special = corpora.text_for_model(smk.input.corpus, kind, smk.input.gguf)
    header = {"model_sha256": ref["sha256"], "corpus_sha256": sha256_file(smk.input.corpus), "kv": "f16",
              "corpus": smk.wildcards.corpus, "context": smk.wildcards.ctx, "parse_special": parse_special}
    threads = cfg.get("threads") or smk.threads
    with RawContext(smk.input.gguf, n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    kv="f16", n_threads=threads, n_gpu_layers=cfg.get("gpu_layers", 0),
                    flash_attn=cfg.get("flash_attn")) as ctx:
        res = ppl.run(ctx, text, proto, write_reference=smk.output.logits, ref_header=header,
                      deadline=budget.from_snakemake(smk).deadline,
                      checkpoint=ppl.checkpoint_path(smk.output.logits), resume_key=smk.params.spec,
                      parse_special=parse_special)
    s = ppl.summarize(res)
    peak = peak_rss_bytes()
    log.info("reference %s: PPL %.4f, %d chunks of %d in %.1f s, peak RSS %.0f MiB", smk.output.logits, s["ppl"],
             s["n_chunks"], proto.n_ctx, res["seconds"], peak / 2**20)
    write_json(smk.output.info, {**header, "ppl": s["ppl"], "ppl_err": s["ppl_err"], "n_tokens": s["n_tokens"],
                                 "n_chunks": s["n_chunks"], "n_ctx": proto.n_ctx, "n_batch": proto.n_batch,
                                 "seconds": res["seconds"], "bytes": Path(smk.output.logits).stat().st_size,
                                 "peak_rss_bytes": peak, "tokens_sha256": res["tokens_sha256"],
                                 "spec": smk.params.spec})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
