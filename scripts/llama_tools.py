"""Rule llama_tools: build (or find) llama.cpp's tools for the installed llama-cpp-python."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "workflow"))

from quantladder import llama_tools  # noqa: E402
from quantladder.errors import ConfigError  # noqa: E402
from quantladder.io import write_json  # noqa: E402
from quantladder.scriptutil import main  # noqa: E402


def run(smk):
    version, backend = llama_tools.library_version(), llama_tools.library_backend()
    if (version, backend) != (smk.wildcards.version, smk.wildcards.backend):
        raise ConfigError(f"this job's llama-cpp-python is {version} ({backend}), the workflow planned "
                          f"{smk.wildcards.version} ({smk.wildcards.backend}): run it in one environment")
    record = llama_tools.ensure(smk.params.cache_dir, tuple(smk.params.cmake_args), jobs=smk.threads, log=sys.stderr)
    write_json(smk.output[0], record)


main(run, snakemake)
