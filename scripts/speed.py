"""Rule speed: pp/tg tokens per second with llama-bench's protocol (mean ± sd over repetitions)."""

from quantladder import points
from quantladder.measures import speed
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk, "speed")
    if pt.blocked:  # the gate against llama-bench failed on this card: no figure, the reason
        pt.write_metrics(smk.output.metrics, [])
        return
    s = smk.config["measures"]["speed"]
    res = speed.measure(pt.model_path, n_prompt=s["n_prompt"], n_gen=s["n_gen"], repetitions=s["repetitions"],
                        depths=s["depths"], parallel=s["parallel"], n_batch=s["n_batch"], n_ubatch=s["n_ubatch"], n_threads=pt.threads, kv=pt.kv,
                        n_gpu_layers=pt.config["gpu_layers"], flash_attn=pt.config.get("flash_attn"))
    engine = next(iter(res.values()))["engine"] if res else {}
    pt.write_metrics(smk.output.metrics, speed.metric_rows(res), engine=engine, extra={"raw": res})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
