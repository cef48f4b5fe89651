"""Rule quantize: one rung from the reference (llama-quantize, or the same C API via llama-cpp-python)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import models  # noqa: E402
from quantladder.gguf_meta import read_info  # noqa: E402
from quantladder.io import read_json, sha256_file, write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    opts = json.loads(smk.params.options)
    binary = models.find_llama_quantize(smk.params.binary)
    ref_info = read_json(str(smk.input.gguf) + ".json")
    record = models.quantize(
        smk.input.gguf, smk.output.gguf, smk.wildcards.rung, binary=binary,
        imatrix=opts.get("imatrix"), allow_requantize=bool(opts.get("allow_requantize")),
        output_tensor_type=opts.get("output_tensor_type"),
        token_embedding_type=opts.get("token_embedding_type"), n_threads=smk.threads,
    )
    record["reference_sha256"] = ref_info["sha256"]
    record["reference_derived_from"] = ref_info.get("reference_derived_from")
    record["sha256"] = sha256_file(smk.output.gguf)
    record["info"] = read_info(smk.output.gguf).as_dict()
    write_json(smk.output.info, record)


main(run, snakemake)
