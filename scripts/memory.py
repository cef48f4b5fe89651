"""Rule memory: file size, bits per weight, predicted weights + KV + buffers, measured peak."""

from quantladder import points
from quantladder.gguf_meta import GGUFInfo, read_info
from quantladder.measures import memory
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    pt = points.from_snakemake(smk, "memory")
    # the rung's record holds what its GGUF says (read when it was made: Gemma-3's 262k-token vocabulary
    # costs 15 s to parse again); a record without it, the file itself
    rec = pt.model_record.get("info")
    info = GGUFInfo(**{**rec, "path": pt.model_path}) if rec else read_info(pt.model_path)
    n_ctx = smk.config["measures"]["memory"]["n_ctx"]
    if info.n_ctx_train and n_ctx > info.n_ctx_train:
        n_ctx = info.n_ctx_train  # never beyond what the model was trained for
    res = memory.measure(pt.model_path, info, n_ctx=n_ctx, kv=pt.kv, n_threads=pt.threads,
                         n_gpu_layers=pt.config["gpu_layers"], flash_attn=pt.config.get("flash_attn"))
    pt.write_metrics(smk.output.metrics, memory.metric_rows(res), extra={"raw": res})


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
