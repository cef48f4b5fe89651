"""Rule perplexity: PPL with llama-perplexity's protocol, and KLD / Δp / same-top against the
reference rung's stored log-probabilities (identical tokens)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import points  # noqa: E402
from quantladder.engine import RawContext  # noqa: E402
from quantladder.io import read_json, sha256_file  # noqa: E402
from quantladder.measures import perplexity as ppl  # noqa: E402
from quantladder import budget  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    pt = points.from_snakemake(smk, "perplexity")
    if pt.blocked:  # the gate against llama-perplexity failed on this card: no figure, the reason
        pt.write_metrics(smk.output.metrics, [])
        return
    settings = smk.config["measures"]["perplexity"]
    proto = ppl.Protocol(n_ctx=settings["n_ctx"], n_batch=settings["n_batch"], max_chunks=settings["max_chunks"])
    text = Path(smk.input.corpus).read_text(encoding="utf-8")
    reference = ppl.ReferenceReader(smk.input.reference) if smk.input.reference else None
    n = proto.n_seq * proto.n_ctx
    with RawContext(pt.model_path, n_ctx=n, n_batch=n, n_seq_max=proto.n_seq, kv=pt.kv, n_threads=pt.threads,
                    n_gpu_layers=pt.config.get("gpu_layers", 0), flash_attn=pt.config.get("flash_attn")) as ctx:
        res = ppl.run(ctx, text, proto, reference=reference, deadline=budget.from_snakemake(smk).deadline,
                      checkpoint=ppl.checkpoint_path(smk.output.metrics), resume_key=smk.params.spec)
        engine = ctx.resolved
    s = ppl.summarize(res)
    data = {"name": settings["corpus"], "sha256": sha256_file(smk.input.corpus),
            "tokens_sha256": res["tokens_sha256"], "n_tokens_scored": s["n_tokens"], "n_chunks": s["n_chunks"]}
    if reference is not None:
        data["reference_logits"] = read_json(Path(smk.input.reference).with_suffix(".json"))
    pt.write_metrics(smk.output.metrics, ppl.metric_rows(s, proto.n_ctx), data=data, engine=engine,
                     extra={"summary": s, "seconds": res["seconds"]})


main(run, snakemake)
