"""Rule energy: joules per generated and per prompt token, net of the node's idle power (NVML).

On a card without NVML (a CPU run) the figures are absent with the reason, never zero.
"""

from quantladder import points
from quantladder.measures import energy
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk, "energy")
    s = smk.config["measures"]["energy"]
    res, engine = energy.measure_bench_workload(
        pt.model_path, n_prompt=s["n_prompt"], n_gen=s["n_gen"], idle_cache_path=smk.params.idle_cache, kv=pt.kv,
        n_threads=pt.threads, n_gpu_layers=pt.config["gpu_layers"], flash_attn=pt.config.get("flash_attn"),
        interval_s=s["interval_s"], idle_window_s=s["idle_window_s"], idle_max_age_s=s["idle_max_age_s"])
    n_ctx = None if engine is None else s["n_prompt"] + s["n_gen"]  # an absent result ran no context
    pt.write_metrics(smk.output.metrics, energy.metric_rows(res, n_ctx=n_ctx), engine=engine, extra={"raw": res})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
