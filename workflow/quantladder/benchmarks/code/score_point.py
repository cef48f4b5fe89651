"""The score_code rule's work for one point: saved replies -> sandboxed tests -> verdicts + metrics.

Kept out of scripts/ so that tests can drive it with a stand-in for the snakemake object.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ... import points, sandbox
from ...errors import DataError
from ...io import atomic_path, read_json, read_jsonl, sha256_file
from . import data
from .score import SCORER_VERSION, ScoreSettings, metric_rows, score_generations

log = logging.getLogger("quantladder.code")

SCORING_ENVS = {"bigcodebench_hard": "envs/bigcodebench-eval.txt"}


def scoring_env_info(suite: str, repo_root: str | Path) -> dict:
    """The scoring environment's pinned requirements and their sha256 (part of the manifest)."""
    rel = SCORING_ENVS.get(suite)
    if not rel:
        return {"requirements": None, "note": "standard library only"}
    path = Path(repo_root) / rel
    if not path.exists():
        raise DataError(f"{path}: the scoring environment's requirements are missing")
    return {"requirements": rel, "sha256": sha256_file(path)}


def run(smk, repo_root: str | Path) -> dict:
    suite = smk.wildcards.suite
    section = smk.config["benchmarks"][suite]
    pt = points.from_snakemake(smk, suite)
    done = read_json(smk.input.done)
    metrics_path, verdicts_path = Path(smk.output.metrics), Path(smk.output.verdicts)
    if pt.blocked or done.get("blocked"):
        with atomic_path(verdicts_path) as tmp:
            tmp.write_text("")
        return pt.write_metrics(metrics_path, [])
    settings = ScoreSettings.from_config(section)
    # Refuse, with install instructions, before anything runs: SandboxUnavailable is a
    # QuantladderError, which the rule reports as one line naming the rule.
    backend_desc = sandbox.check_backend(settings.backend)
    items = data.load_suite(suite, section)
    gen_path = Path(smk.input.done).with_name("generations.jsonl")
    spec = smk.params.spec
    gens = [g for g in read_jsonl(gen_path) if g.get("spec") == spec]
    have = {g["item_id"] for g in gens}
    missing = [i for i in done.get("item_ids", []) if i not in have]
    if missing:
        raise DataError(f"{gen_path}: {len(missing)} replies missing for spec {spec} "
                        f"(e.g. {missing[:3]}); rerun generate_code for this point")
    threads = int(getattr(smk, "threads", 1) or 1)
    log.info("scoring %d replies of %s in the %s sandbox, %d at a time", len(gens), suite, backend_desc, threads)
    verdicts = score_generations(items, gens, settings, threads=threads)
    with atomic_path(verdicts_path) as tmp:
        with open(tmp, "w") as f:
            for v in verdicts:
                f.write(json.dumps(v, sort_keys=True) + "\n")
    info = data.suite_info(suite, section)
    info.update({"scoring_env": scoring_env_info(suite, repo_root), "scorer_version": SCORER_VERSION,
                 "n_items": len(items)})
    return pt.write_metrics(metrics_path, metric_rows(verdicts), data=info,
                            extra={"sandbox": backend_desc, "scorer_version": SCORER_VERSION})
