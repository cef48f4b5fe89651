"""Helpers to run the real workflow in a scratch directory with a small config."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def default_config() -> dict:
    """config/config.yaml as a run reads it: validated, the schema's defaults filled in (the file says
    only what differs from the schema, so its raw YAML lacks every key left at its default)."""
    from quantladder import config as qconfig

    return qconfig.load(qconfig.DEFAULT_CONFIG)


def small_config(rungs=("Q8_0", "Q4_K_M", "Q2_K"), benchmarks_on=()) -> dict:
    """The default config, made small: few chunks, short speed tests, every task benchmark off
    unless named (the default configfile is deep-merged under it, so everything is explicit)."""
    cfg = default_config()
    fam = next(iter(cfg["families"]))
    # the default config's other families are merged under this one by Snakemake: switched off
    cfg["families"] = {name: ({**f, "rungs": list(rungs)} if name == fam else {**f, "enabled": False})
                       for name, f in cfg["families"].items()}
    cfg["families"][fam]["task_rungs"] = list(rungs)  # the benchmarks a test switches on run on every rung
    cfg["threads"] = 2
    ppl = cfg["measures"]["perplexity"]
    ppl.update({"n_ctx": 256, "n_batch": 1024, "max_chunks": 4, "corpora": [ppl["corpus"]]})
    cfg["measures"]["speed"].update({"n_prompt": 64, "n_gen": 16, "repetitions": 2})
    cfg["measures"]["memory"].update({"n_ctx": 512})
    for name, section in (cfg.get("benchmarks") or {}).items():
        section["enabled"] = name in benchmarks_on
    cfg["anchors"] = str(REPO / "config" / "anchors.yaml")
    cfg["find"] = None  # the default's walk accepts a KLD on a corpus this config does not measure
    return stand_ins_off(cfg)


def stand_ins_off(cfg: dict) -> dict:
    """The default config's prebuilt rungs switched off in ``cfg`` (``enabled: false``), whatever ``cfg`` writes
    of their families: Snakemake merges config/config.yaml under a test's config, a mapping key by key, so
    an entry the test leaves out comes back. The default's stand-in for a third party's file is a copy
    of its Q4_K_M, which a test's ladder may not make; a test's own prebuilt rungs stay as it wrote them."""
    from quantladder import config as qconfig

    default = qconfig.load(qconfig.DEFAULT_CONFIG, validate=False)
    for name, fam in (default.get("families") or {}).items():
        for pre in (fam or {}).get("prebuilt") or {}:
            mine = cfg.setdefault("families", {}).setdefault(name, {})
            mine.setdefault("prebuilt", {}).setdefault(pre, copy.deepcopy(fam["prebuilt"][pre]))["enabled"] = False
    return cfg


def make_fixture_module():
    """tests/fixtures/dataset/make_fixture.py, the producers' canned dataset, as a module."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dataset"))
    try:
        import make_fixture
    finally:
        sys.path.pop(0)
    return make_fixture


def task_workdir(wd: Path, cfg: dict, rungs: dict[str, tuple[str, Path]], benchmark: str,
                 rules=("common", "tasks", "aggregate")) -> None:
    """A scratch workflow for one task benchmark: each rung's GGUF linked where the ladder would make it
    (``rungs``: rung -> (reference | quantized, model path)) with its sidecar, the benchmark's anchor gate
    unanchored, ``cfg`` as config.yaml beside the repository's schemas and anchors, and a Snakefile
    including ``rules``."""
    from quantladder.gguf_meta import read_info
    from quantladder.io import sha256_file, write_json

    family = next(iter(cfg["families"]))
    for rung, (kind, model) in rungs.items():
        gguf = wd / f"resources/models/{family}/{kind}/{rung}.gguf"
        gguf.parent.mkdir(parents=True, exist_ok=True)
        gguf.symlink_to(model)
        write_json(str(gguf) + ".json", {"sha256": sha256_file(model), "info": read_info(model).as_dict(),
                                         "method": "test fixture"})
    write_json(wd / f"results/{cfg['card']}/anchors/{benchmark}.json",
               {"benchmark": benchmark, "status": "unanchored", "reason": "test run"})
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    (wd / "config").mkdir()
    (wd / "config" / "schemas").symlink_to(REPO / "config" / "schemas")
    (wd / "config" / "anchors.yaml").symlink_to(REPO / "config" / "anchors.yaml")
    (wd / "Snakefile").write_text('configfile: "config.yaml"\n'
                                  + "".join(f'include: "{REPO}/rules/{r}.smk"\n' for r in rules))


def scratch_snakemake(wd: Path, *args: str, timeout: int = 1200, check: bool = True) -> subprocess.CompletedProcess:
    """Snakemake on a :func:`task_workdir` (its own Snakefile), this checkout's package on the path."""
    r = subprocess.run([SNAKEMAKE, "-s", str(wd / "Snakefile"), "-d", str(wd), "--cores", "2", "--nolock", *args],
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(REPO / "workflow")})
    if check:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r


def write_config(workdir: Path, cfg: dict) -> Path:
    p = workdir / "test-config.yaml"
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def snakemake(workdir: Path, *args: str, config: Path | None = None, timeout: int = 1200,
              check: bool = True) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, *args, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2"]
    if config:  # last: --configfile takes every word after it
        cmd += ["--configfile", str(config)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}")
    return r


def planned_jobs(dry_run_output: str) -> list[tuple[str, dict]]:
    """(rule, wildcards) of every job a dry run lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not m:
            continue
        wc = {}
        w = re.search(r"wildcards: (.*)", block)
        if w:
            wc = dict(kv.split("=", 1) for kv in w.group(1).split(", "))
        jobs.append((m.group(1), wc))
    return jobs


def kill_after_first_record(cmd: list[str], records, wait_s: float = 300, **popen) -> None:
    """Start ``cmd`` and SIGKILL it once ``records()`` returns anything (its first record written and
    fsynced), as a lost node or the OOM killer would; the kill is asserted."""
    import signal
    import time

    p = subprocess.Popen(cmd, **popen)
    try:
        deadline = time.time() + wait_s
        while not records() and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL, f"{cmd[:3]} ended by itself (rc {p.returncode}) before it could be killed"
