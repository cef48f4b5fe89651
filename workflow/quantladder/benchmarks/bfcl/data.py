"""BFCL v4 data: obtain the files, pin them by hash, load items per category.

The files are the ones the `bfcl-eval` wheel ships (questions, possible answers, the multi-turn
function docs and backend sources, and the prompt templates). Its dependency set is heavy and
pinned, so the data are taken without installing it:

- ``{"wheel": {"version": "2026.3.23"}}``: ``pip download --no-deps`` from the package index;
- ``{"path": "/some/bfcl_eval-*.whl"}`` or a directory laid out as the wheel's ``bfcl_eval/``;
- ``{"hf": {"repo_id", "revision", "repo_type", "subfolder"}}``: the same layout on the hub,
  fetched through huggingface_hub (honours HF_HUB_OFFLINE and the hub cache).

``materialize`` copies the needed files into one directory and writes ``data.json`` beside it:
version, origin, and the sha256 of every file (their combined hash is the data hash in manifests).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

from ...errors import ConfigError, DataError
from ...io import hash_obj, sha256_file, write_json

PREFIX = "BFCL_v4"
# Categories that score (agentic web search / memory need outside services: not run here).
NON_LIVE = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
            "irrelevance"]
LIVE = ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
        "live_relevance"]
MULTI_TURN = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
CATEGORIES = NON_LIVE + LIVE + MULTI_TURN
NO_ANSWER = {"irrelevance", "live_irrelevance", "live_relevance"}

# Multi-turn backend classes: module file and function-doc file (BFCL's executable backend config).
BACKENDS = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS = {"MathAPI"}

# Paths inside the wheel's bfcl_eval/ package -> paths in the materialized directory.
BACKEND_DIR = "eval_checker/multi_turn_eval/func_source_code"
PROMPTS_FILE = "constants/default_prompts.py"


def wanted_files() -> list[str]:
    files = [PROMPTS_FILE]
    for cat in CATEGORIES:
        files.append(f"data/{PREFIX}_{cat}.json")
        if cat not in NO_ANSWER:
            files.append(f"data/possible_answer/{PREFIX}_{cat}.json")
    for module, doc in BACKENDS.values():
        files.append(f"data/multi_turn_func_doc/{doc}")
        files.append(f"{BACKEND_DIR}/{module}.py")
    files.append(f"{BACKEND_DIR}/long_context.py")
    return sorted(set(files))


def _from_zip(whl: Path, dest: Path) -> None:
    try:
        zf = zipfile.ZipFile(whl)
    except (OSError, zipfile.BadZipFile) as e:
        raise DataError(f"{whl}: not a readable wheel: {e}") from e
    with zf:
        names = set(zf.namelist())
        for rel in wanted_files():
            member = f"bfcl_eval/{rel}"
            if member not in names:
                raise DataError(f"{whl}: has no {member} (is this a bfcl-eval wheel of the v4 layout?)")
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(zf.read(member))


def _from_dir(root: Path, dest: Path) -> None:
    if (root / "bfcl_eval").is_dir():
        root = root / "bfcl_eval"
    for rel in wanted_files():
        src = root / rel
        if not src.is_file():
            raise DataError(f"{src}: missing (a BFCL data directory holds the bfcl_eval/ layout)")
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(src.read_bytes())


def _from_hf(hf: dict, dest: Path, cache_dir: str | None = None) -> str:
    for key in ("repo_id", "revision"):
        if key not in hf:
            raise ConfigError(f"benchmarks.bfcl.source.hf.{key} is required (pin the revision)")
    from huggingface_hub import hf_hub_download

    sub = hf.get("subfolder") or None
    for rel in wanted_files():
        try:
            got = hf_hub_download(repo_id=hf["repo_id"], filename=rel, subfolder=sub, revision=hf["revision"],
                                  repo_type=hf["repo_type"], cache_dir=cache_dir)
        except Exception as e:
            raise DataError(f"benchmarks.bfcl.source.hf: could not get {rel} from {hf['repo_id']}@{hf['revision']}: "
                            f"{type(e).__name__}: {e}") from e
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(Path(got).read_bytes())
    return hf.get("version", hf["revision"])


def download_wheel(version: str, into: Path) -> Path:
    """``pip download --no-deps bfcl-eval==version``: the wheel only, none of its dependencies."""
    into.mkdir(parents=True, exist_ok=True)
    name = f"bfcl_eval-{version}-py3-none-any.whl"
    if (into / name).is_file():
        return into / name
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"bfcl-eval=={version}",
           "-d", str(into)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (into / name).is_file():
        raise DataError(f"benchmarks.bfcl.source.wheel: `{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
    return into / name


def materialize(source: dict, dest: str | Path, record_path: str | Path, *, download_dir: str | Path | None = None,
                cache_dir: str | None = None) -> dict:
    """Put the BFCL files under ``dest`` and write their record (version, origin, sha256s)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    origin: dict = {}
    if "wheel" in source:
        version = str(source["wheel"]["version"])
        whl = download_wheel(version, Path(download_dir or dest.parent / "wheel"))
        origin = {"wheel": whl.name, "wheel_sha256": sha256_file(whl)}
        _from_zip(whl, dest)
    elif "path" in source:
        p = Path(source["path"]).expanduser()
        if p.is_file() and p.suffix == ".whl":
            _from_zip(p, dest)
            origin = {"wheel": p.name, "wheel_sha256": sha256_file(p)}
            version = p.name.split("-")[1]
        elif p.is_dir():
            _from_dir(p, dest)
            origin = {"dir": str(p)}
            version = str(source.get("version", "local"))
        else:
            raise DataError(f"benchmarks.bfcl.source.path {p}: neither a bfcl-eval wheel nor a directory")
    elif "hf" in source:
        version = _from_hf(source["hf"], dest, cache_dir=cache_dir)
        origin = {"hf": {k: source["hf"][k] for k in ("repo_id", "revision") if k in source["hf"]}}
    else:
        raise ConfigError("benchmarks.bfcl.source: give one of wheel / path / hf")
    files = {rel: sha256_file(dest / rel) for rel in wanted_files()}
    for rel in files:
        if rel.endswith(".json"):
            _check_jsonl(dest / rel)
    record = {"name": "bfcl", "version": version, "origin": origin, "root": str(dest), "files": files,
              "sha256": hash_obj(files)}
    write_json(record_path, record)
    return record


def _check_jsonl(path: Path) -> None:
    """BFCL data files are JSON lines (function docs included); a malformed one fails here, by name."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid JSON: {e}") from e


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise DataError(f"{path}: missing BFCL data file (rerun the bfcl_data rule)")
    _check_jsonl(path)
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_category(root: str | Path, category: str) -> list[dict]:
    """Items of one category with their possible answers (``ground_truth``) attached.

    Multi-turn items get their function docs from the involved classes; for miss_func the held-out
    docs move to ``missed_function`` (BFCL's way: they are offered at that turn).
    """
    if category not in CATEGORIES:
        raise ConfigError(f"benchmarks.bfcl.categories: unknown category {category!r} (known: {CATEGORIES})")
    root = Path(root)
    items = read_jsonl(root / "data" / f"{PREFIX}_{category}.json")
    if category not in NO_ANSWER:
        answers = {a["id"]: a["ground_truth"] for a in read_jsonl(root / "data" / "possible_answer" / f"{PREFIX}_{category}.json")}
        for it in items:
            if it["id"] not in answers:
                raise DataError(f"{root}: no possible answer for {it['id']}")
            it["ground_truth"] = answers[it["id"]]
    if category in MULTI_TURN:
        docs = {}
        for it in items:
            funcs = []
            for cls in it["involved_classes"]:
                if cls not in BACKENDS:
                    raise DataError(f"{it['id']}: unknown backend class {cls!r}")
                if cls not in docs:
                    docs[cls] = read_jsonl(root / "data" / "multi_turn_func_doc" / BACKENDS[cls][1])
                funcs.extend(json.loads(json.dumps(docs[cls])))
            missed = {}
            for turn, names in (it.get("missed_function") or {}).items():
                missed[turn] = []
                for name in names:
                    for i, f in enumerate(funcs):
                        if f["name"] == name:
                            missed[turn].append(funcs.pop(i))
                            break
            it["function"] = funcs
            if missed:
                it["missed_function"] = missed
    for it in items:
        it["category"] = category
    return items


def sample(items: list[dict], limit: int | None, seed: int = 0) -> list[dict]:
    """A deterministic subset: ``limit`` items drawn with a fixed seed, kept in file order."""
    if not limit or limit >= len(items):
        return items
    rng = random.Random(f"{seed}:{items[0]['category'] if items else ''}")
    keep = set(rng.sample(range(len(items)), limit))
    return [it for i, it in enumerate(items) if i in keep]


def load_items(record: dict, categories: list[str], limit: int | None = None, limits: dict | None = None,
               seed: int = 0) -> list[dict]:
    out = []
    for cat in categories:
        lim = (limits or {}).get(cat, limit)
        out.extend(sample(load_category(record["root"], cat), lim, seed))
    return out


def backend_sources(root: str | Path) -> dict[str, str]:
    """The backend class sources (file name -> text), to be written into the sandbox."""
    root = Path(root) / BACKEND_DIR
    out = {}
    for module, _ in BACKENDS.values():
        out[f"{module}.py"] = (root / f"{module}.py").read_text(encoding="utf-8")
    out["long_context.py"] = (root / "long_context.py").read_text(encoding="utf-8")
    return out
