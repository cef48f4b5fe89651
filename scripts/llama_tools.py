"""Rule llama_tools: build (or find) llama.cpp's tools for the installed llama-cpp-python."""

import sys

from quantladder import llama_tools
from quantladder.errors import ConfigError
from quantladder.io import write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    version, backend = llama_tools.library_version(), llama_tools.library_backend()
    if (version, backend) != (smk.wildcards.version, smk.wildcards.backend):
        raise ConfigError(f"this job's llama-cpp-python is {version} ({backend}), the workflow planned "
                          f"{smk.wildcards.version} ({smk.wildcards.backend}): run it in one environment")
    record = llama_tools.ensure(smk.params.cache_dir, tuple(smk.params.cmake_args), jobs=smk.threads, log=sys.stderr)
    write_json(smk.output[0], record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
