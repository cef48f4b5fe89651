"""Rule energy: joules per generated and per prompt token, net of the node's idle power (NVML).

On a card without NVML (a CPU run) the figures are absent with the reason, never zero.
"""

import numpy as np

from quantladder import points
from quantladder.engine import RawContext
from quantladder.measures import energy, speed
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk, "energy")
    s = smk.config["measures"]["energy"]
    reader, why = energy.nvml_reader(0)
    if reader is None:
        res = energy.absent(why or "NVML is not available on this card")
        pt.write_metrics(smk.output.metrics, energy.metric_rows(res), extra={"raw": res})
        return
    try:
        # the idle baseline first, with no model loaded
        idle = energy.idle_baseline(smk.params.idle_cache, reader, window_s=s["idle_window_s"],
                                    max_age_s=s["idle_max_age_s"])
        rng = np.random.default_rng(0)
        with RawContext(pt.model_path, n_ctx=s["n_prompt"] + s["n_gen"], n_batch=max(s["n_prompt"], 1), kv=pt.kv,
                        n_threads=pt.threads, n_gpu_layers=pt.config.get("gpu_layers", 0),
                        flash_attn=pt.config.get("flash_attn")) as ctx:
            speed._prompt(ctx, 16, 16, rng)  # warm-up, as llama-bench does
            ctx.clear()

            def work(mark):
                if s["n_prompt"]:
                    speed._prompt(ctx, s["n_prompt"], s["n_prompt"], rng)
                mark()
                speed._gen(ctx, s["n_gen"], s["n_prompt"], rng)

            res = energy.measure_generation(work, n_gen_tokens=s["n_gen"], n_prompt_tokens=s["n_prompt"],
                                            idle_cache_path=None, reader=reader, interval_s=s["interval_s"],
                                            idle=idle)
            engine = ctx.resolved
    finally:
        reader.close()
    res.pop("trace", None)
    res.pop("value", None)
    pt.write_metrics(smk.output.metrics, energy.metric_rows(res, n_ctx=s["n_prompt"] + s["n_gen"]),
                     engine=engine, extra={"raw": res})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
