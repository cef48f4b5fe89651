"""Rule reference_rung: the family's F16/BF16 reference, dequantized once when the source is quantized."""

import os
import shutil

from quantladder import models
from quantladder.errors import ConfigError
from quantladder.gguf_meta import read_info
from quantladder.io import atomic_path, read_json, sha256_file_stamped, verify_sha256, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    rung = smk.wildcards.rung
    src_info = read_json(smk.input.info)
    verify_sha256(smk.input.gguf, src_info.get("sha256"), what="source model", recorded_in=str(smk.input.info))
    src_type = src_info["file_type"]
    record = {"rung": rung, "source_sha256": src_info["sha256"], "source_file_type": src_type}
    if src_type == rung:
        with atomic_path(smk.output.gguf) as tmp:
            try:
                os.link(smk.input.gguf, tmp, follow_symlinks=True)
            except OSError:
                shutil.copyfile(smk.input.gguf, tmp)
        record["reference_derived_from"] = None
        record["method"] = "source is the reference"
    elif rung == "F16":
        record.update(models.dequantize_to_f16(smk.input.gguf, smk.output.gguf))
        record["reference_derived_from"] = {"file_type": src_type, "sha256": src_info["sha256"],
                                            "source": src_info["source"]}
        record["method"] = "dequantized with gguf.quants (reference implementation of each block format)"
    else:
        raise ConfigError(
            f"families.{smk.wildcards.family}.reference is {rung} but the source is {src_type}: "
            "a quantized source can only be dequantized to F16"
        )
    record["sha256"] = sha256_file_stamped(smk.output.gguf)
    record["info"] = read_info(smk.output.gguf).as_dict()
    write_json(smk.output.info, record)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
