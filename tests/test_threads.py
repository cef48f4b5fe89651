"""ggml's threads on shared cores (issue 41, case 9): a waiting thread sleeps instead of spinning
(OMP_WAIT_POLICY=PASSIVE, set as the package loads, before llama.cpp's library does), the thread count
follows the process's real CPU allowance, and replies do not depend on either.

The slowdown itself is a benchmark's matter, not a test's (benchmarks/contention.py; the figures are
in docs/generation.md, "Threads")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

REPLY = """
import json, sys
sys.path.insert(0, {workflow!r})
import quantladder, os
from quantladder.engine import Engine, EngineSettings
eng = Engine({model!r}, EngineSettings(n_ctx=256, n_threads=2))
g = eng.generate(eng.chat_prompt([{{"role": "user", "content": "Name three rivers of Europe."}}]), 24)
print(json.dumps({{"text": g.text, "policy": eng.resolved["omp_wait_policy"], "env": os.environ.get("OMP_WAIT_POLICY")}}))
"""


def _run(code: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return {**env, **kw}


def test_threads_sleep_at_barriers_by_default_a_users_policy_wins_and_replies_are_the_same(smollm_q4km):
    code = REPLY.format(workflow=str(REPO / "workflow"), model=str(smollm_q4km))
    ours = _run(code, _env())
    assert ours["env"] == "PASSIVE" and ours["policy"] == "PASSIVE"  # recorded in the engine settings
    spin = _run(code, _env(OMP_WAIT_POLICY="ACTIVE"))
    assert spin["env"] == "ACTIVE" and spin["policy"] == "ACTIVE"
    assert ours["text"] == spin["text"] and ours["text"]


def test_the_thread_count_follows_the_process_affinity():
    code = ("import os, sys; sys.path.insert(0, %r); os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from quantladder.engine import EngineSettings; print(EngineSettings().resolved()['n_threads'])"
            % str(REPO / "workflow"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "1"
