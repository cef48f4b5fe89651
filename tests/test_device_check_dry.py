"""The GPU device check's dry mode on this CPU host (issue 46): ``tests/gpu/device_check.sh --dry``
runs every step that does not need CUDA at tiny sizes (a synthetic tiny model, the project's CPU
library and llama.cpp tools), names each step it skips, and leaves the figures a device run would
leave: so the script is known to work before the one run a lent device allows.

The first run on a machine builds llama-batched-bench and llama-server into the tools cache
(minutes, once; quantladder.llama_tools.extra_tool); after that it takes a minute or two.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_device_check_dry_run_passes_on_a_cpu_host(tmp_path):
    env = {**os.environ, "QL_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"),
           "QL_GPU_CARRY": str(tmp_path / "no-carry")}
    env.pop("QL_DRY", None)
    r = subprocess.run(["bash", str(REPO / "tests" / "gpu" / "device_check.sh"), "--dry"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=3600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    # what needs CUDA is named as skipped, not silently absent
    assert "SKIPPED (dry run, needs CUDA): nvidia-smi, nvcc, the CUDA build" in r.stdout
    assert "its configure check skipped" in r.stdout  # no carried tree given here
    out = tmp_path / "out"

    check = json.loads((out / "device_check.json").read_text())
    speed = check["rungs"]["Q4_K_M"]["speed"]
    assert speed["tg_tokens_per_s"] > 0 and speed["pp_tokens_per_s"] > 0
    assert check["rungs"]["Q4_K_M"]["llama_bench"].get("tg_tokens_per_s", 0) > 0  # the reference ran beside it

    # batched decode at every width asked, beside llama-batched-bench and llama-server, both selections
    gen = json.loads((out / "gen_throughput.json").read_text())
    key = next(iter(gen))
    assert key.endswith("/B1")
    b4 = gen[key[:-len("B1")] + "B4"]
    assert set(b4) == {"lb", "ql", "qb", "srv"}
    assert all(r["s_tg"] > 0 for side in b4.values() for r in side)
    assert set(gen[key]) == {"lb", "ql", "qb"}  # llama-server only at the widths asked for it
    assert "llama-server S_TG" in (out / "gen_throughput.log").read_text()

    # the noise floor: replies at 1 against 4 sequences, and the kernel's rows bit for bit
    noise = (out / "batch_invariance.log").read_text()
    assert "identical" in noise
    assert json.loads((out / "batch_invariance.json").read_text())
    assert "done (rc=0)" in r.stdout
    assert not list((tmp_path / "work" / "models").glob("*.gguf"))  # the models are removed after
