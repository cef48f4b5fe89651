"""Rule perplexity: one pass (a corpus at a context) of one point: PPL with llama-perplexity's
protocol, KLD / Δp / same-top against the reference rung's stored log-probabilities (identical
tokens), and the share of the evaluation text that the rung's calibration text also holds.

Rule perplexity_point: the point's passes joined into its perplexity/metrics.json (every row keeps
its corpus as subset)."""

import json
from pathlib import Path

from quantladder import budget, corpora, points
from quantladder.engine import RawContext
from quantladder.dataset import metric_row
from quantladder.io import hash_obj, read_json, sha256_file, write_json
from quantladder.measures import perplexity as ppl
from quantladder.measures.memory import peak_rss_bytes
from quantladder.scriptutil import log, main, mock_from_argv


def _calibrations(ctx, smk, cal: dict) -> list[dict]:
    """The rung's calibration texts as the matrix saw them (tokens), or why that is unknown."""
    if not cal:
        return []  # no importance matrix: nothing to overlap with
    if cal.get("corpus") is None:
        return [{"corpus": None, "reason": f"the rung's importance matrix {cal.get('file')} was made elsewhere: "
                                           "its calibration text is unknown"}]
    text = Path(smk.input.calibration[0]).read_text(encoding="utf-8")
    return [{"corpus": cal["corpus"], "tokens": ppl.calibration_tokens(ctx, text, cal.get("settings"))}]


def run_pass(smk):
    pt = points.from_snakemake(smk, "perplexity")
    corpus, ctx_label = smk.wildcards.corpus, smk.wildcards.ctx
    pt.config = ppl.pass_config(smk.config, corpus, ctx_label)  # the manifest's spec is this pass's
    settings = pt.config["measures"]["perplexity"]
    info = pt.model_record.get("info", pt.model_record)
    proto = ppl.protocol(settings, info.get("n_ctx_train"), source=pt.model_path)
    kind = "chat" if corpora.is_chat(settings["source"]) else "text"
    text, parse_special = corpora.text_for_model(smk.input.corpus, kind, pt.model_path)
    reference = ppl.ReferenceReader(smk.input.reference) if smk.input.reference else None
    cal = json.loads(smk.params.calibration)
    with RawContext(pt.model_path, n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    kv=pt.kv, n_threads=pt.threads, n_gpu_layers=pt.config.get("gpu_layers", 0),
                    flash_attn=pt.config.get("flash_attn")) as ctx:
        res = ppl.run(ctx, text, proto, reference=reference, deadline=budget.from_snakemake(smk).deadline,
                      checkpoint=ppl.checkpoint_path(smk.output.metrics), resume_key=smk.params.spec,
                      parse_special=parse_special)
        engine = ctx.resolved
        calibrations = _calibrations(ctx, smk, cal)
    s = ppl.summarize(res)
    rows = ppl.metric_rows(s, proto.n_ctx, subset=corpus)
    ov = settings["overlap"]
    ov_rows, ov_records = ppl.overlap_rows(res["tokens"], calibrations, corpus=corpus, n_ctx=proto.n_ctx,
                                           ngram=ov["ngram"], flag_pct=ov["flag_pct"])
    rows += ov_rows
    data = {"name": corpus, **corpora.parse_name(corpus), "sha256": sha256_file(smk.input.corpus),
            "record": read_json(smk.input.corpus_info), "kind": kind, "chat_template_parsed": parse_special,
            "tokens_sha256": res["tokens_sha256"], "n_tokens_scored": s["n_tokens"], "n_chunks": s["n_chunks"],
            "n_ctx": proto.n_ctx, "context": ctx_label, "n_batch": proto.n_batch, "calibration_overlap": ov_records}
    if reference is not None:
        data["reference_logits"] = read_json(Path(smk.input.reference).with_suffix(".json"))
    peak = peak_rss_bytes()
    log.info("%s: PPL %.4f, %d tokens scored in %.1f s, peak RSS %.0f MiB", ppl.pass_name(corpus, ctx_label),
             s["ppl"], s["n_tokens"], res["seconds"], peak / 2**20)
    pt.write_metrics(smk.output.metrics, rows, data=data, engine=engine,
                     extra={"summary": s, "seconds": res["seconds"], "peak_rss_bytes": peak})


def run_point(smk):
    """Join the passes. A pass the family cannot take (a chat corpus for a model without a chat
    template) is listed by params.skipped and appears as absent rows with the reason."""
    docs = [read_json(p) for p in smk.input.passes]
    if not docs:
        raise ValueError("rule perplexity_point: no pass to join")
    head = docs[0]
    rows, corpora_data, statuses = [], {}, []
    for d in docs:
        rows += d["rows"]
        data = d["manifest"].get("data") or {}
        corpora_data[ppl.pass_name(data.get("name"), data.get("context"))] = data
        statuses.append((d.get("status"), d.get("status_reason")))
    for sk in json.loads(smk.params.skipped):
        rows.append(metric_row("ppl", None, "1", subset=sk["corpus"], status="absent", status_reason=sk["reason"]))
    man = dict(head["manifest"])
    # One record per pass; the file-level data hash covers them all (each pass's manifest keeps its own).
    man["data"] = {"name": "perplexity corpora", "corpora": corpora_data,
                   "sha256": hash_obj(sorted(v.get("sha256") or "" for v in corpora_data.values()))}
    man["spec_hash"] = smk.params.spec
    names = list(corpora_data)
    man["passes"] = {k: d["manifest"]["spec_hash"] for k, d in zip(names, docs)}
    order = ("ok", "unanchored", "incomplete", "absent", "failed", "blocked")
    st, reason = max(statuses, key=lambda x: order.index(x[0]) if x[0] in order else 0)
    doc = {"benchmark": "perplexity", "status": st, "status_reason": reason,
           "incomplete": any(d.get("incomplete") for d in docs), "rows": rows, "manifest": man,
           "passes": {k: {"seconds": d.get("seconds"), "peak_rss_bytes": d.get("peak_rss_bytes")}
                      for k, d in zip(names, docs)}}
    write_json(smk.output.manifest, man)
    write_json(smk.output.metrics, doc)


if __name__ == "__main__":
    smk = globals().get("snakemake") or mock_from_argv()
    main(run_point if smk.rule == "perplexity_point" else run_pass, smk)
