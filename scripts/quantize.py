"""Rule quantize: one rung from the reference through llama.cpp's C API (or a configured
llama-quantize; byte-identical), with its recipe of tensor types and its importance matrix."""

import json
from pathlib import Path

from quantladder import models
from quantladder.gguf_meta import read_info
from quantladder.io import read_json, sha256_file_stamped, verify_sha256, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    opts = json.loads(smk.params.options)
    binary = models.find_llama_quantize(smk.params.binary)
    ref_info = read_json(str(smk.input.gguf) + ".json")
    verify_sha256(smk.input.gguf, ref_info.get("sha256"), what="reference rung",
                  recorded_in=f"{smk.input.gguf}.json")
    im = opts.get("imatrix")
    im_path = None
    if im:  # a one-file named input comes as a str or as a one-item list, by Snakemake version
        im_path = smk.input.imatrix if isinstance(smk.input.imatrix, str) else smk.input.imatrix[0]
        side = Path(str(im_path) + ".json")
        if side.exists():  # computed in the DAG: its record names its bytes
            verify_sha256(im_path, read_json(side).get("sha256"), what="importance matrix", recorded_in=str(side))
    recipe = {k: opts[k] for k in models.RECIPE_KEYS if k in opts}
    record = models.quantize(
        smk.input.gguf, smk.output.gguf, smk.wildcards.rung, binary=binary, imatrix=im_path, recipe=recipe,
        allow_requantize=bool(opts.get("allow_requantize")), n_threads=smk.threads,
    )
    record["recipe_name"] = opts.get("recipe")
    if im:
        side = Path(str(im_path) + ".json")
        record["imatrix"] = (read_json(side) if side.exists()  # computed in the DAG: corpus, settings, tools
                             else {"file": str(im_path), "given": True})
        record["imatrix"]["sha256"] = sha256_file_stamped(im_path)
    record["reference_sha256"] = ref_info["sha256"]
    record["reference_derived_from"] = ref_info.get("reference_derived_from")
    record["sha256"] = sha256_file_stamped(smk.output.gguf)  # this host's stamp: its consumers here hash nothing
    record["info"] = read_info(smk.output.gguf).as_dict()
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
