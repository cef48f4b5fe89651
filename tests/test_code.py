"""Code benchmarks: prompts, extraction, resume, data sources, and sandboxed scoring of the suites
(HumanEval's canonical solutions, a BigCodeBench-format fixture in its hub layout)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from quantladder import schemas
from quantladder import config, sandbox
from quantladder.benchmarks.code import data, extract, prompts, score

REPO = Path(__file__).resolve().parents[1]
BCB_FIXTURE = REPO / "tests" / "fixtures" / "code" / "bigcodebench_hard_tiny.jsonl"
FAST = score.ScoreSettings(limits=sandbox.Limits(wall_s=10, cpu_s=10))


# -- prompting --------------------------------------------------------------------------------

def _render(msgs):
    """A stand-in chat template (ChatML-like) that renders every turn, as GGUF templates do."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)


def test_prompt_follows_bigcodebench_protocol():
    p = prompts.chat_prompt(_render, "def f(x):\n    '''doc'''\n", "complete")
    assert p.startswith("<|im_start|>user\n" + prompts.INSTRUCTION_PREFIX + "\n```\ndef f(x):")
    # The assistant turn is open: the response prefix, then an opened python block, nothing after.
    assert p.endswith("<|im_start|>assistant\n" + prompts.RESPONSE_PREFIX + "\n```python\n")
    q = prompts.chat_prompt(_render, "Write f.", "instruct")
    assert "\nWrite f.\n" in q and "```\nWrite" not in q
    with pytest.raises(ValueError):
        prompts.messages("x", "chat")


def test_prompt_through_the_gguf_chat_template(smollm_q8):
    from quantladder.engine import Engine, EngineSettings

    with Engine(str(smollm_q8), EngineSettings(n_ctx=512)) as eng:
        p = prompts.chat_prompt(lambda m: eng.chat_prompt(m, add_generation_prompt=False), "def f():\n", "complete")
    assert p.endswith("```python\n") and prompts.SPLITTER not in p
    assert prompts.INSTRUCTION_PREFIX in p and p.index(prompts.INSTRUCTION_PREFIX) < p.index(prompts.RESPONSE_PREFIX)


# -- extraction -------------------------------------------------------------------------------

def test_extract_code_from_fences():
    assert extract.extract_code("def f():\n    return 1\n```\nThis works because") == "def f():\n    return 1\n"
    reply = "\n```\nSure! Here it is:\n```python\nimport os\n\ndef g():\n    pass\n```\n"
    assert extract.extract_code(reply, "g") == "import os\n\ndef g():\n    pass\n"
    assert extract.extract_code("", "g") == ""


def test_sanitize_keeps_entry_point_and_its_needs():
    code = ("import math\nK = 3\n\ndef helper(x):\n    return x * K\n\ndef unused():\n    pass\n\n"
            "def f(x):\n    return helper(math.floor(x))\n\nprint(f(2))\nassert f(1) == 3\n"
            "if __name__ == '__main__':\n    f(0)\n")
    clean, defines = extract.sanitize(code, "f")
    assert defines
    assert "def helper" in clean and "K = 3" in clean and "import math" in clean
    assert "unused" not in clean and "print(" not in clean and "__main__" not in clean
    # Unparsable tails are cut to the longest parsable prefix.
    clean, defines = extract.sanitize("def f(x):\n    return x\n\ndef g(:\n", "f")
    assert defines and "def g" not in clean


def test_humaneval_completion_full_function_or_body():
    item = data.load_humaneval(limit=1)[0]
    full = "from typing import List\n\ndef has_close_elements(numbers, threshold):\n    return False\n"
    comp = extract.humaneval_completion(item.prefix, full, item.entry_point)
    assert comp.startswith("\n") and "def has_close_elements" in comp
    body = "    return False\n"
    assert extract.humaneval_completion(item.prefix, body, item.entry_point) == body
    prog = extract.humaneval_program(item.prefix, body, item.test, item.entry_point)
    assert prog.endswith("check(has_close_elements)")


# -- the generation path never reaches the executor -------------------------------------------

def test_generation_path_never_imports_the_sandbox_or_the_scorer():
    """Generating code benchmarks (the loop, the registry, the code suite's driver) loads neither the
    sandbox nor the scorer: nothing model-written can run on the generation host."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, %r)\n"
            "from quantladder import generation, benchmarks\n"
            "b = benchmarks.create('humaneval', {'enabled': True, 'limit': 2})\n"
            "items, _ = b.build_items(b.fetch_source('x'), reference_gguf=None, family={})\n"
            "d = b.drive(items[0], None, None)\n"
            "print(sorted(m for m in sys.modules if m.startswith('quantladder.')))\n") % str(REPO / "workflow")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307 -- our own printed list
    assert "quantladder.sandbox" not in loaded and "quantladder.benchmarks.code.score" not in loaded, loaded


def test_a_prompt_too_long_is_a_failed_item_not_a_dead_job(tmp_path):
    """The one prompt-overflow rule: never decoded, scored as failed (prompt_too_long), counted."""
    from quantladder import benchmarks, scoring
    from quantladder.benchmarks import ScoringContext
    from quantladder.benchmarks.base import Env

    b = benchmarks.create("humaneval", {"enabled": True, "limit": 3, "timeout_s": 10.0})
    src = b.fetch_source("x")
    items, _ = b.build_items(src, reference_gguf=None, family={})
    recs = [{"item_id": it.id, "text": "    return None\n", "code": "    return None\n", "n_gen_tokens": 5,
             "finish_reason": "stop"} for it in items]
    recs[1] = {"item_id": items[1].id, "text": "", "code": "", "n_gen_tokens": 0, "finish_reason": "prompt_too_long"}
    out = scoring.score(b, items, recs, {}, key="k", store_dir=tmp_path, ctx=ScoringContext(Env(src)))
    assert [v["item_id"] for v in out.verdicts] == [it.id for it in items]
    assert out.verdicts[1]["error_type"] == "prompt_too_long" and not out.verdicts[1]["correct"]
    rows = {(r["metric"], r["subset"]): r for r in out.rows}
    assert rows[("error_items", "prompt_too_long")]["value"] == 1


# -- data sources -----------------------------------------------------------------------------

def test_bigcodebench_items_from_local_jsonl_and_parquet(tmp_path):
    items = data.load_bigcodebench_hard({"path": str(BCB_FIXTURE)}, splits=["instruct", "complete"])
    assert [i.item_id for i in items][:2] == ["instruct:BigCodeBench/9001", "instruct:BigCodeBench/9002"]
    assert Counter(i.subset for i in items) == {"instruct": 3, "complete": 3}
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [json.loads(line) for line in BCB_FIXTURE.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "x.parquet")
    again = data.load_bigcodebench_hard({"path": str(tmp_path / "x.parquet")}, splits=["complete"], limit=2)
    assert [i.task_id for i in again] == ["BigCodeBench/9001", "BigCodeBench/9002"]
    with pytest.raises(Exception, match="splits"):
        data.load_bigcodebench_hard({"path": str(BCB_FIXTURE)}, splits=["chat"])


def test_bigcodebench_from_the_hub_cache_layout(tmp_path, monkeypatch):
    """The hub path, offline, against a cache laid out as huggingface_hub lays it out."""
    import huggingface_hub.constants as hc
    import pyarrow as pa
    import pyarrow.parquet as pq

    cfg = config.load()["benchmarks"]["bigcodebench_hard"]  # its splits: the schema's default
    hf = cfg["source"]["hf"]
    rev = hf["revision"]
    snap = tmp_path / "datasets--bigcode--bigcodebench-hard" / "snapshots" / rev
    (snap / Path(hf["filename"]).parent).mkdir(parents=True)
    recs = [json.loads(line) for line in BCB_FIXTURE.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(recs), snap / hf["filename"])
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    items = data.load_bigcodebench_hard(cfg["source"], splits=cfg["splits"], cache_dir=str(tmp_path))
    assert len(items) == 6 and items[0].subset == "instruct"
    info = data.bcb_info(cfg["source"], cache_dir=str(tmp_path))
    assert len(info["sha256"]) == 64


def test_config_sections_match_their_schemas():
    import jsonschema

    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())["benchmarks"]
    for name in ("humaneval", "bigcodebench_hard"):
        schema = schemas.load(schemas.benchmark_schema_path(name))
        jsonschema.validate(cfg[name], schema)
    assert cfg["humaneval"]["enabled"] and cfg["humaneval"]["limit"]
    assert not cfg["bigcodebench_hard"]["enabled"]
    anchors = yaml.safe_load((REPO / "config/anchors.yaml").read_text())["anchors"]
    bcb = [a for a in anchors if a["benchmark"] == "bigcodebench_hard"]
    assert bcb and bcb[0]["published"] == 20.3 and bcb[0]["subset"] == "instruct"


# -- sandboxed scoring ------------------------------------------------------------------------

# HumanEval's canonical solutions, the BigCodeBench fixture, syntax errors and the scoring venv are
# scored in tests/test_code_scoring.py (the harness's protocol), forging programs in
# tests/test_sandbox_forgery.py.


def test_scoring_refuses_without_a_sandbox(tmp_path, monkeypatch):
    """No backend: the score stage stops with install instructions before anything runs; nothing runs
    unsandboxed (scripts/score.py calls scoring_setup first)."""
    from quantladder import benchmarks

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap anywhere
    sandbox._probe_cache.clear()
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        benchmarks.create("humaneval", {"enabled": True}).scoring_setup()
    sandbox._probe_cache.clear()
