"""Rule imatrix: an importance matrix of the family's reference rung over a calibration corpus."""

import json
import sys
from pathlib import Path

from quantladder import imatrix, llama_tools
from quantladder.errors import ConfigError
from quantladder.io import read_json, sha256_file, verify_sha256, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    settings = imatrix.resolve_settings(json.loads(smk.params.settings))
    expected = imatrix.file_name(smk.wildcards.corpus, settings)
    if Path(smk.output.imatrix).name != expected:
        raise ConfigError(f"{smk.output.imatrix}: quantize.imatrix_settings make {expected}; "
                          "ask for the matrix of the configured settings")
    tools = llama_tools.load(smk.input.tools)
    ref = read_json(smk.input.info)
    verify_sha256(smk.input.gguf, ref.get("sha256"), what="reference rung", recorded_in=str(smk.input.info))
    res = imatrix.compute(llama_tools.tool(tools, "llama-imatrix"), smk.input.gguf, smk.input.corpus,
                          smk.output.imatrix, settings=settings, threads=smk.config.get("threads") or smk.threads,
                          gpu_layers=smk.config["gpu_layers"], log=sys.stderr)
    write_json(smk.output.info, {
        **res,
        "family": smk.wildcards.family,
        "file": str(smk.output.imatrix),
        "corpus": {"name": smk.wildcards.corpus, "path": str(smk.input.corpus), "sha256": sha256_file(smk.input.corpus),
                   "source": smk.config["corpora"][smk.wildcards.corpus]},
        "reference": {"rung": Path(smk.input.gguf).stem, "sha256": ref["sha256"]},
        "tools": llama_tools.identity(tools, "llama-imatrix"),
        "spec": smk.params.spec,
    })


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
