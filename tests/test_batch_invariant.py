"""Batch-invariant generation (docs/generation.md, "Batch invariance"): the project's patch to the
vendored llama.cpp (quantladder/patches/llama.cpp), built into the wheel and the tools by
`make setup`, and the engine's mode that uses it (GGML_CPU_BATCH_INVARIANT_ROWS, repacking off).

The replies are checked on the real SmolLM2-135M rungs, each configuration in a process of its
own (ggml reads the variable once per process): the same items at n_parallel 1, 8 and 16, in
other orders, in waves of other sizes, and cut by SIGKILL and finished by another process at
another n_parallel, all byte-identical to n_parallel 1 in plan order.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest

from quantladder import REPO_ROOT
from quantladder import config as qconfig
from quantladder import llama_tools
from quantladder.engine import Engine, EngineSettings
from quantladder.errors import ConfigError
from quantladder.kv_policy import BATCH_INVARIANT_ROWS, check_batch_invariant
from quantladder.llama_handle import BATCH_INVARIANT_VAR

from pipeline_util import kill_after_first_record

QUESTIONS = [
    "Write a Python function that returns the sum of a list.", "What is the capital of France?",
    "Name three primary colours.", "Explain recursion in one sentence.", "Count from one to ten in words.",
    "Write a haiku about the sea.", "What does HTTP stand for?", "Give two uses of a hash table.",
    "Translate 'good morning' into Spanish.", "Why is the sky blue?", "List the days of the week.",
    "Describe a cat to someone who has never seen one.",
]

# Each run: n_parallel, the order the items are handed to the engine, the wave size (items per
# Engine.run: which items can share a step)
RUNS = [
    {"name": "npl1", "npl": 1, "order": "plan", "wave": 12},
    {"name": "npl8", "npl": 8, "order": "plan", "wave": 12},
    {"name": "npl16", "npl": 16, "order": "plan", "wave": 12},
    {"name": "npl8-reversed", "npl": 8, "order": "reversed", "wave": 12},
    {"name": "npl4-shuffled-waves5", "npl": 4, "order": "shuffled", "wave": 5},
    {"name": "npl16-shuffled-waves3", "npl": 16, "order": "shuffled", "wave": 3},
]

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from quantladder.engine import Engine, EngineSettings, Request
    spec = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], "a")
    def one(p, n):
        return (yield Request(tuple(p), n))
    for run in spec["runs"]:
        order = run["order"]
        s = EngineSettings(n_ctx=spec["n_ctx"], n_threads=2, n_parallel=run["npl"], batch_invariant=spec["invariant"])
        with Engine(spec["model"], s) as eng:
            for w0 in range(0, len(order), run["wave"]):
                wave = order[w0:w0 + run["wave"]]
                def done(i, g, wave=wave, name=run["name"]):
                    out.write(json.dumps({"run": name, "item": wave[i], "tokens": list(g.tokens)}) + "\\n")
                    out.flush(); os.fsync(out.fileno())
                    if run.get("slow"):
                        time.sleep(30)  # long enough to be killed with the rest of the wave in flight
                eng.run([one(spec["prompts"][j], spec["max_tokens"][j]) for j in wave], done)
""")


def _orders(n: int) -> dict[str, list[int]]:
    shuffled = [(7 * i + 3) % n for i in range(n)]  # a fixed permutation (n = 12: 7 is coprime)
    assert sorted(shuffled) == list(range(n))
    return {"plan": list(range(n)), "reversed": list(range(n))[::-1], "shuffled": shuffled}


def _prompts(model) -> tuple[list[list[int]], list[int]]:
    with Engine(str(model), EngineSettings(n_ctx=512, n_threads=2)) as eng:
        prompts = [list(eng.prompt_tokens(eng.chat_prompt([{"role": "user", "content": q}]))) for q in QUESTIONS]
    return prompts, [24 + 8 * (i % 4) for i in range(len(prompts))]  # sequences end at different steps


def _env(invariant_var: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != BATCH_INVARIANT_VAR}
    if invariant_var is not None:
        env[BATCH_INVARIANT_VAR] = invariant_var
    return env


def _records(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _generate(tmp_path, model, runs, invariant=True, tag="a", slow=False):
    prompts, budgets = _prompts(model)
    orders = _orders(len(prompts))
    spec = {"model": str(model), "n_ctx": 512, "invariant": invariant, "prompts": prompts, "max_tokens": budgets,
            "runs": [{**r, "order": orders[r["order"]], "slow": slow} for r in runs]}
    (tmp_path / f"spec-{tag}.json").write_text(json.dumps(spec))
    (tmp_path / "gen.py").write_text(SCRIPT)
    out = tmp_path / f"out-{tag}.jsonl"
    return [sys.executable, str(tmp_path / "gen.py"), str(tmp_path / f"spec-{tag}.json"), str(out)], out


def _by_run(records) -> dict[str, dict[int, list[int]]]:
    out: dict[str, dict[int, list[int]]] = {}
    for r in records:
        out.setdefault(r["run"], {})[r["item"]] = r["tokens"]
    return out


# -- the patch and the build -------------------------------------------------------------------

def test_the_patch_applies_to_the_vendored_source_and_keys_every_build(tmp_path, monkeypatch):
    """The patch applies cleanly to the llama.cpp that the pinned llama-cpp-python's sdist vendors,
    adds the variable to both kernels' choices, and is part of the wheel's and the tools' keys."""
    version = llama_tools.pinned_version(REPO_ROOT / "pyproject.toml")
    sdist = llama_tools.fetch_sdist(version, llama_tools.cache_root() / "sdist")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/ggml/src/ggml-cpu/" in m.name]
        tar.extractall(tmp_path, members=members, filter="data")
    src = next(tmp_path.glob("llama_cpp_python-*/vendor/llama.cpp"))
    llama_tools.apply_patches(src)
    cpu = src / "ggml" / "src" / "ggml-cpu"
    assert BATCH_INVARIANT_VAR in (cpu / "batch-invariant.h").read_text()
    for f in ("llamafile/sgemm.cpp", "tiled/tiled.cpp"):
        assert "ggml_cpu_batch_invariant_rows()" in (cpu / f).read_text(), f
    with pytest.raises(llama_tools.ToolsError, match="0001-batch-invariant-rows.patch"):
        llama_tools.apply_patches(src)  # applied twice: refused, naming the patch
    key = llama_tools.build_key(version, "cpu", llama_tools.cmake_args("cpu"))
    assert list(llama_tools.patches_key()) == ["0001-batch-invariant-rows.patch"]
    edited = tmp_path / "patches"
    edited.mkdir()
    (edited / "0001-batch-invariant-rows.patch").write_text(llama_tools.patches()[0].read_text() + "\n")
    monkeypatch.setattr(llama_tools, "PATCH_DIR", edited)  # an edited patch: another build
    assert llama_tools.build_key(version, "cpu", llama_tools.cmake_args("cpu")) != key


def test_the_installed_library_carries_the_patch():
    """`make setup` installed the project's patched build (the engine refuses batch invariance otherwise)."""
    r = subprocess.run([sys.executable, "-c", "from quantladder.llama_handle import check_invariant_library as c; c()"],
                       capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr[-2000:]


# -- what the mode refuses ---------------------------------------------------------------------

def test_settings_that_break_invariance_are_refused_naming_the_key():
    check_batch_invariant(16, False, 0, "f16")
    with pytest.raises(ConfigError, match="generation.batch_invariant.*gpu_layers must be 0"):
        check_batch_invariant(8, False, 99)
    with pytest.raises(ConfigError, match="flash attention off"):
        check_batch_invariant(8, True, 0, "q8_0")
    with pytest.raises(ConfigError, match=f"at most {BATCH_INVARIANT_ROWS - 1} sequences"):
        check_batch_invariant(BATCH_INVARIANT_ROWS, False, 0)
    cfg = qconfig.load()
    on = copy.deepcopy(cfg)
    on["generation"]["batch_invariant"] = True
    qconfig.check_semantics(on)  # the default config holds with it
    gpu = copy.deepcopy(on)
    gpu["gpu_layers"] = 99
    with pytest.raises(ConfigError, match="gpu_layers must be 0"):
        qconfig.check_semantics(gpu)
    kv = copy.deepcopy(on)
    kv["benchmarks"]["ruler"]["kv_types"] = ["q4_0"]
    with pytest.raises(ConfigError, match=r"flash attention off.*benchmarks\.ruler"):
        qconfig.check_semantics(kv)
    many = copy.deepcopy(on)
    many["generation"]["n_parallel"] = 64
    with pytest.raises(ConfigError, match="at most 63 sequences"):
        qconfig.check_semantics(many)


def test_the_mode_is_the_processs_and_never_silent(smollm_q8, tmp_path):
    """The variable set by hand for an engine that did not ask, and a second engine of the other
    mode in one process, are refused (ggml reads the variable once, at its first product)."""
    code = textwrap.dedent(f"""
        from quantladder.engine import Engine, EngineSettings
        from quantladder.errors import ConfigError
        import sys
        first = sys.argv[1] == "on"
        with Engine({str(smollm_q8)!r}, EngineSettings(n_ctx=64, n_threads=1, batch_invariant=first)):
            pass
        try:
            Engine({str(smollm_q8)!r}, EngineSettings(n_ctx=64, n_threads=1, batch_invariant=not first))
        except ConfigError as e:
            print("REFUSED", e)
    """)
    for first in ("on", "off"):
        r = subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, env=_env(), timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "REFUSED" in r.stdout and "process of its own" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-c", code, "off"], capture_output=True, text=True, env=_env("64"), timeout=300)
    assert r.returncode != 0 and f"{BATCH_INVARIANT_VAR}=64 is set in the environment" in r.stderr


# -- the replies -------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rung", ["smollm_f16", "smollm_q4km", "smollm_q2k"])
def test_replies_are_byte_identical_at_any_batch(rung, request, tmp_path):
    """F16 (llamafile's sgemm takes two rows or more), Q4_K_M (repacked Q4_K, the tiled K-quant
    kernel from 8 rows) and Q2_K (repacked Q4_0 and Q2_K): every reply at n_parallel 8 and 16, in
    other orders and waves, equals the reply at n_parallel 1 in plan order, token for token."""
    model = request.getfixturevalue(rung)
    cmd, out = _generate(tmp_path, model, RUNS)
    subprocess.run(cmd, check=True, timeout=1200, env=_env())
    got = _by_run(_records(out))
    base = got["npl1"]
    assert sorted(base) == list(range(len(QUESTIONS)))
    assert sum(len(t) for t in base.values()) > 20 * len(QUESTIONS)  # real replies, not empty ones
    for r in RUNS[1:]:
        assert got[r["name"]] == base, r["name"]


@pytest.mark.slow
def test_a_run_killed_mid_wave_is_finished_by_another_batch(smollm_q4km, tmp_path):
    """A process generating at n_parallel 8 is killed (SIGKILL) after its first reply; another
    process generates the items left at n_parallel 16 with other batch mates: every reply, the
    killed run's and the resumed run's, equals the uninterrupted run at n_parallel 1."""
    cmd, full = _generate(tmp_path, smollm_q4km, [RUNS[0]], tag="full")
    subprocess.run(cmd, check=True, timeout=600, env=_env())
    want = _by_run(_records(full))["npl1"]
    cmd, cut = _generate(tmp_path, smollm_q4km, [RUNS[1]], tag="cut", slow=True)
    kill_after_first_record(cmd, lambda: _records(cut), env=_env())
    before = _by_run(_records(cut))["npl8"]
    assert 1 <= len(before) < len(QUESTIONS)
    left = [i for i in range(len(QUESTIONS)) if i not in before]
    spec = json.loads((tmp_path / "spec-cut.json").read_text())
    spec["runs"] = [{"name": "resumed", "npl": 16, "order": left, "wave": len(left)}]
    (tmp_path / "spec-cut.json").write_text(json.dumps(spec))
    subprocess.run(cmd, check=True, timeout=600, env=_env())
    after = _by_run(_records(cut))["resumed"]
    assert {**before, **after} == want
