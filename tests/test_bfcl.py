"""BFCL: decoder and checker on hand-written outputs, data acquisition (wheel, directory, hub cache),
prompting, and the real embedded model on a small deterministic sample producing verdicts and rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quantladder import benchmarks
from quantladder.benchmarks.bfcl import checker, data, parse, prompts, score
from quantladder.errors import DataError

BFCL_VERSION = "2026.3.23"
WHEEL = f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl"


# -- the data (the real wheel, downloaded once without dependencies) ---------------------------
@pytest.fixture(scope="session")
def bfcl_wheel(repo_root) -> Path:
    """The bfcl-eval wheel: resources/benchmarks/bfcl/wheel/ (the benchmark_source rule's download dir), else
    pip download."""
    for d in (repo_root / "resources" / "benchmarks" / "bfcl" / "wheel", repo_root / "resources" / "bfcl" / "wheel",
              Path(os.environ.get("QUANTLADDER_BFCL_WHEEL_DIR", "/nonexistent"))):
        if (d / WHEEL).is_file():
            return d / WHEEL
    d = repo_root / "resources" / "benchmarks" / "bfcl" / "wheel"
    try:
        return data.download_wheel(BFCL_VERSION, d)
    except DataError as e:
        pytest.skip(f"bfcl-eval wheel not available offline and the package index is unreachable: {e}")


@pytest.fixture(scope="session")
def bfcl_record(bfcl_wheel, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bfcl")
    return data.materialize({"path": str(bfcl_wheel)}, root / "data", root / "data.json")


def test_materialize_records_version_and_hashes(bfcl_record):
    assert bfcl_record["version"] == BFCL_VERSION
    assert bfcl_record["origin"]["wheel"] == WHEEL and len(bfcl_record["origin"]["wheel_sha256"]) == 64
    assert "data/BFCL_v4_simple_python.json" in bfcl_record["files"]
    assert "eval_checker/multi_turn_eval/func_source_code/gorilla_file_system.py" in bfcl_record["files"]
    bench = benchmarks.create("bfcl", {"enabled": True})
    assert len(bench.pinned_files(bfcl_record)) == len(bfcl_record["files"])
    bench.verify_source(bfcl_record, "data.json")  # every file still has its recorded hash


def test_category_sizes_and_answers(bfcl_record):
    sizes = {c: len(data.load_category(bfcl_record["root"], c)) for c in data.CATEGORIES}
    assert sizes["simple_python"] == 400 and sizes["simple_java"] == 100 and sizes["simple_javascript"] == 50
    assert sizes["multi_turn_base"] == 200 and sizes["live_relevance"] == 16
    mf = data.load_category(bfcl_record["root"], "multi_turn_miss_func")[0]
    held = [f["name"] for fs in mf["missed_function"].values() for f in fs]
    assert held and not {f["name"] for f in mf["function"]} & set(held)  # held-out docs leave the list


def test_sample_is_deterministic(bfcl_record):
    a = data.load_items(bfcl_record, ["simple_python", "live_multiple"], limit=3, seed=0)
    b = data.load_items(bfcl_record, ["simple_python", "live_multiple"], limit=3, seed=0)
    c = data.load_items(bfcl_record, ["simple_python", "live_multiple"], limit=3, seed=1)
    assert [i["id"] for i in a] == [i["id"] for i in b] and len(a) == 6
    assert [i["id"] for i in a] != [i["id"] for i in c]


def test_tampered_or_malformed_file_is_named(bfcl_record, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(bfcl_record["root"], root)
    rec = {**bfcl_record, "root": str(root)}
    bad = root / "data" / "BFCL_v4_parallel.json"
    bad.write_text(bad.read_text() + "{not json\n")
    with pytest.raises(DataError, match=rf"BFCL_v4_parallel.json: this bfcl data file's sha256 is [0-9a-f]{{64}}, but "
                                        rf"data.json records {bfcl_record['files']['data/BFCL_v4_parallel.json']}"):
        benchmarks.create("bfcl", {"enabled": True}).verify_source(rec, "data.json")
    with pytest.raises(DataError, match=r"BFCL_v4_parallel.json:200: not valid JSON"):
        data.load_category(root, "parallel")
    (root / "data" / "possible_answer" / "BFCL_v4_multiple.json").unlink()
    with pytest.raises(DataError, match="BFCL_v4_multiple.json: missing"):
        data.load_category(root, "multiple")


def test_directory_source(bfcl_record, tmp_path):
    rec = data.materialize({"path": bfcl_record["root"], "version": BFCL_VERSION}, tmp_path / "d", tmp_path / "d.json")
    assert rec["files"] == bfcl_record["files"] and rec["sha256"] == bfcl_record["sha256"]


def test_hub_source_from_offline_cache(bfcl_record, tmp_path, monkeypatch):
    """The online path through huggingface_hub, served from a hub cache laid out as the hub writes it."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--example--bfcl-v4"
    snap = repo / "snapshots" / rev / "bfcl_eval"
    shutil.copytree(bfcl_record["root"], snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hfc

    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", True)
    src = {"hf": {"repo_id": "example/bfcl-v4", "revision": rev, "repo_type": "dataset", "subfolder": "bfcl_eval",
                  "version": BFCL_VERSION}}
    rec = data.materialize(src, tmp_path / "out", tmp_path / "out.json", cache_dir=str(tmp_path / "hub"))
    assert rec["sha256"] == bfcl_record["sha256"] and rec["version"] == BFCL_VERSION
    assert rec["origin"] == {"hf": {"repo_id": "example/bfcl-v4", "revision": rev}}
    with pytest.raises(DataError, match="could not get"):
        data.materialize({"hf": {"repo_id": "example/absent", "revision": rev}}, tmp_path / "o2", tmp_path / "o2.json",
                         cache_dir=str(tmp_path / "hub"))


# -- prompting ---------------------------------------------------------------------------------
def test_prompt_is_bfcl_prompting_mode(bfcl_record):
    item = data.load_category(bfcl_record["root"], "simple_java")[0]
    msgs = prompts.first_messages(bfcl_record["root"], item)
    sp = msgs[0]["content"]
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    assert "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]" in sp
    assert "functions in json format" in sp
    docs = json.loads(sp[sp.index("[\n"): sp.rindex("]") + 1])
    assert docs[0]["description"].endswith("Note that the provided function is in Java 8 SDK syntax.")
    assert all(p["type"] == "string" for p in docs[0]["parameters"]["properties"].values())
    assert item["function"][0]["parameters"]["properties"]["controller"]["type"] == "any"  # checker keeps types
    live = next(i for i in data.load_category(bfcl_record["root"], "live_irrelevance")
                if i["question"][0][0]["role"] == "system")
    merged = prompts.first_messages(bfcl_record["root"], live)[0]["content"]
    assert merged.endswith("\n\n" + live["question"][0][0]["content"])  # entry's own system message kept


# -- decoding ----------------------------------------------------------------------------------
def test_decode_python_forms():
    assert parse.decode('```\n[math.hypot(x=3, y=4.0), f(s="a")]\n```') == [{"math.hypot": {"x": 3, "y": 4.0}},
                                                                           {"f": {"s": "a"}}]
    assert parse.decode("f(a=[1, (2, 3)], b={'k': -1}, c=None, d=x)") == [{"f": {"a": [1, (2, 3)], "b": {"k": -1},
                                                                               "c": None, "d": "x"}}]
    assert parse.decode("f(a=2*3+1)") == [{"f": {"a": 7}}]  # folded, never executed
    # a call as a value stays its source text (BFCL's rule), it is never run
    assert parse.decode("f(a=open('x').read())") == [{"f": {"a": "open('x').read()"}}]
    for bad in ("I think the answer is 4.", "[f(a=1), 2]", "f(a=2**10**10)", "f(a={1, 2})"):
        with pytest.raises(parse.DecodeError):
            parse.decode(bad)


def test_decode_java_and_js_values_stay_source():
    (call,) = parse.decode('[Foo.bar(n=5L, xs=new int[]{1, 2}, m=new HashMap<String, Integer>() {{ put("a", 1); }}, s="x y")]', "java")
    assert call == {"Foo.bar": {"n": "5L", "xs": "new int[]{1,2}", "m": "new HashMap<String,Integer>()", "s": "x y"}}
    with pytest.raises(parse.DecodeError):
        parse.decode("[Foo.bar(xs=[1, 2])]", "java")
    assert parse.decode("[go(a='x', b=[1, 2], c=true)]", "javascript") == [{"go": {"a": "x", "b": "[1, 2]", "c": "true"}}]
    assert parse.decode("a = 1", "javascript") is None  # valid but no call: not in call format


# -- checker (hand-written outputs; parity with the official verdicts is tests/test_bfcl_parity.py) --
FUNC = {"name": "geo.distance", "parameters": {"type": "dict", "required": ["a", "unit"], "properties": {
    "a": {"type": "array", "items": {"type": "float"}}, "unit": {"type": "string"},
    "round": {"type": "integer"}, "opts": {"type": "dict"}}}}
ANS = {"geo.distance": {"a": [[1.0, 2.5]], "unit": ["km", "kilometers"], "round": ["", 2], "opts": [""]}}


@pytest.mark.parametrize("call,ok,err", [
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "KM"}}, True, None),
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "kilo-meters"}}, True, None),  # standardised: '-' dropped
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "km", "round": 2}}, True, None),
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "km", "round": 3}}, False, "value_error:others"),
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "km", "round": True}}, False, "type_error:simple"),
    ({"geo.distance": {"a": [1.0, "2.5"], "unit": "km"}}, False, "type_error:nested"),
    ({"geo.distance": {"unit": "km"}}, False, "simple_function_checker:missing_required"),
    ({"geo.distance": {"a": [1.0, 2.5], "unit": "km", "zoom": 1}}, False, "simple_function_checker:unexpected_param"),
    ({"geo_distance": {"a": [1.0, 2.5], "unit": "km"}}, False, "simple_function_checker:wrong_func_name"),
    ({"geo.distance": {"a": [2.5, 1.0], "unit": "km"}}, False, "value_error:list/tuple"),
])
def test_checker_rules(call, ok, err):
    res = checker.check_calls([FUNC], [call], [ANS], "simple_python", "python")
    assert res["valid"] is ok and res["error_type"] == err


def test_checker_int_for_float_and_parallel_order():
    f = {"name": "f", "parameters": {"type": "dict", "required": ["x"], "properties": {"x": {"type": "float"}}}}
    a1, a2 = {"f": {"x": [1.0]}}, {"f": {"x": [2.0]}}
    assert checker.check_calls([f], [{"f": {"x": 1}}], [a1], "simple_python", "python")["valid"]
    assert checker.check_calls([f], [{"f": {"x": 2}}, {"f": {"x": 1.0}}], [a1, a2], "parallel", "python")["valid"]
    res = checker.check_calls([f], [{"f": {"x": 2}}], [a1, a2], "parallel", "python")
    assert res["error_type"] == "parallel_function_checker_no_order:wrong_count"


def test_relevance_and_irrelevance_verdicts():
    item = {"id": "irrelevance_0", "category": "irrelevance", "function": [FUNC]}
    assert score.verdict(item, "No function fits this question.")["correct"]
    assert score.verdict(item, "[]")["correct"]
    assert not score.verdict(item, "[geo.distance(a=[1.0], unit='km')]")["correct"]
    rel = {"id": "live_relevance_0", "category": "live_relevance", "function": [FUNC]}
    assert score.verdict(rel, "[anything(x=1)]")["correct"]
    v = score.verdict(rel, "I would rather not.")
    assert not v["correct"] and v["error_type"] == "relevance_error:decoder_failed" and v["parse_failed"]


def test_aggregates_need_all_parts():
    vs = [{"item_id": f"{c}_{i}", "subset": c, "correct": i == 0, "degenerate": False}
          for c in ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple")
          for i in range(2)]
    rows = {(r["metric"], r["subset"]): r for r in score.metric_rows(vs, [])}
    assert rows[("accuracy", "simple")]["value"] == pytest.approx(50.0)
    assert rows[("accuracy", "non_live")]["value"] == pytest.approx(50.0)
    assert rows[("accuracy", "non_live")]["n"] == 12 and rows[("accuracy", "simple_java")]["unit"] == "%"
    assert ("accuracy", "live") not in rows and ("accuracy", "multi_turn") not in rows
    assert ("accuracy", "overall") not in rows  # never a leaderboard-comparable overall here
    rows = {(r["metric"], r["subset"]): r for r in score.metric_rows(vs[2:], [])}
    assert ("accuracy", "non_live") not in rows  # simple_python missing: no non-live aggregate


# -- the real model, end to end ----------------------------------------------------------------
# Several categories with short prompts: each item costs a prompt of ~500 tokens on 2 shared cores.
SAMPLE = ["simple_python", "simple_java", "parallel", "irrelevance"]


def test_real_model_sample_gives_verdicts_and_rows(smollm_q8, bfcl_record, tmp_path):
    """The real model through the one generation loop and the one score stage, batched."""
    from quantladder import benchmarks, dataset, generation, scoring
    from quantladder.benchmarks import ScoringContext
    from quantladder.engine import Engine, EngineSettings

    bench = benchmarks.create("bfcl", {"enabled": True, "categories": SAMPLE, "limit": 1, "max_new_tokens": 24,
                                       "n_ctx": 4096})
    items, facts = bench.build_items(bfcl_record, reference_gguf=None, family={})
    assert [it.subset for it in items] == SAMPLE and facts["data_sha256"] == bfcl_record["sha256"]
    assert all("ground_truth" not in it.data for it in items)  # answers only where the scorer reads them
    loop = generation.Loop(bench, items, key="k", store_dir=tmp_path, n_parallel=2,
                           engine_for=lambda n: Engine(str(smollm_q8), EngineSettings(n_ctx=n, n_parallel=2)),
                           env=bench.open_env(bfcl_record, "generate"))
    res = loop.run()
    gens = res.records
    assert [g["item_id"] for g in gens] == [it.id for it in items]
    assert all(g["n_gen_tokens"] > 0 and g["finish_reason"] in ("stop", "length") for g in gens)
    assert all(isinstance(g["degenerate"], bool) and g["n_prompt_tokens"] > 300 for g in gens)
    out = scoring.score(bench, items, gens, res.meta, key="s", store_dir=tmp_path,
                        ctx=ScoringContext(bench.open_env(bfcl_record, "score")))
    verdicts = out.verdicts
    assert len(verdicts) == len(items) and {v["subset"] for v in verdicts} == set(SAMPLE)
    assert all(isinstance(v["correct"], bool) and (v["correct"] or v["error_type"]) for v in verdicts)
    names = {(r["metric"], r["subset"]) for r in out.rows}
    assert {("accuracy", c) for c in SAMPLE} <= names and ("parse_failure_rate", None) in names
    assert ("degenerate_items", None) in names and ("generation_output_tokens", None) in names
    assert ("accuracy", None) not in names  # the headline needs every AST category
    table = dataset.to_table([{**r, "card": "test", "benchmark": "bfcl"} for r in out.rows])
    assert table.num_rows == len(out.rows)


def test_headline_is_the_mean_of_non_live_and_live_ast_as_bfcl_weighs_them():
    from quantladder.benchmarks.bfcl import LIVE_AST, NON_LIVE_AST, headline

    vs = []
    acc = {c: k for c, k in zip(NON_LIVE_AST + LIVE_AST, (1, 2, 3, 4, 0, 4, 2, 2, 1, 3))}
    n = {c: 4 for c in NON_LIVE_AST}
    n.update({"live_simple": 4, "live_multiple": 8, "live_parallel": 2, "live_parallel_multiple": 4})
    for c in NON_LIVE_AST + LIVE_AST:
        vs += [{"item_id": f"{c}{i}", "subset": c, "correct": i < acc[c]} for i in range(n[c])]
    rows = {(r["metric"], r["subset"]): r["value"] for r in score.metric_rows(vs, NON_LIVE_AST + LIVE_AST)}
    value, se, used = headline(vs)
    assert value == pytest.approx((rows[("accuracy", "non_live")] + rows[("accuracy", "live")]) / 2)
    assert used == len(vs) and 0 < se < 20


def test_generation_and_scoring_rules_run(repo_root, tmp_path, bfcl_record, bfcl_wheel, smollm_f16, smollm_q8):
    """The generic rules through Snakemake on a copy of the workflow with a tiny BFCL config; scoring
    again (a scoring-only change) reruns no generation job."""
    work = tmp_path / "wf"
    for d in ("rules", "scripts", "config", "workflow", "envs"):
        shutil.copytree(repo_root / d, work / d, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    smk = work / "Snakefile"
    smk.write_text('configfile: "config/config.yaml"\n'
                   + "".join(f'include: "rules/{r}.smk"\n' for r in ("common", "tools", "models", "anchors",
                                                                    "tasks")))
    from quantladder.gguf_meta import read_info
    from quantladder.io import sha256_file

    for kind, rung, path in (("quantized", "Q8_0", smollm_q8), ("reference", "F16", smollm_f16)):
        model_dir = work / "resources" / "models" / "smollm2-135m-instruct" / kind
        model_dir.mkdir(parents=True)
        (model_dir / f"{rung}.gguf").symlink_to(path)
        (model_dir / f"{rung}.gguf.json").write_text(json.dumps({"sha256": sha256_file(path), "method": "test",
                                                                 "info": read_info(path).as_dict()}))
    anchors = work / "results" / "cpu" / "anchors"
    anchors.mkdir(parents=True)
    (anchors / "bfcl.json").write_text(json.dumps({"status": "unanchored", "reason": "test"}))
    wheel_dir = work / "resources" / "benchmarks" / "bfcl" / "wheel"  # the source rule finds it there
    wheel_dir.mkdir(parents=True)
    shutil.copy(bfcl_wheel, wheel_dir)
    extra = ("card: cpu\ngeneration: {n_parallel: 2}\nbenchmarks:\n  bfcl:\n    enabled: true\n"
             "    categories: [simple_python, irrelevance]\n"
             "    limit: 1\n    max_new_tokens: 16\n    n_ctx: 4096\n  humaneval: {enabled: false}\n"
             "  ruler: {enabled: false}\n")
    (work / "extra.yaml").write_text(extra)
    target = "results/cpu/points/smollm2-135m-instruct/Q8_0/f16/bfcl/metrics.json"
    env = {**os.environ, "PYTHONPATH": str(work / "workflow")}
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--cores", "2", "--configfile", "config/config.yaml",
           "extra.yaml", "--allowed-rules", "benchmark_source", "benchmark_items", "generate", "score", "--", target]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    point = work / "results/cpu/points/smollm2-135m-instruct/Q8_0/f16/bfcl"
    done = json.loads((point / "generations.json").read_text())
    assert done["complete"] and done["planned"] == 2 and done["n_parallel"] == 2
    m = json.loads((point / "metrics.json").read_text())
    assert m["status"] == "unanchored" and m["manifest"]["data"]["sha256"] == bfcl_record["sha256"]
    assert {(r["metric"], r["subset"]) for r in m["rows"]} >= {("accuracy", "simple_python"), ("accuracy", "irrelevance")}
    assert len((point / "verdicts.jsonl").read_text().splitlines()) == 2
    names = {r["metric"] for r in m["rows"]}
    assert {"parse_failure_rate", "degenerate_items", "generation_seconds"} <= names and "n_parallel" not in names
    assert m["generation"]["n_parallel"] == 2  # a setting of the point (its dataset column), not a figure
    # a scoring-only change (the sandbox's wall time) reruns the score job and no generation job
    (work / "extra.yaml").write_text(extra.replace("    n_ctx: 4096\n", "    n_ctx: 4096\n    sandbox_wall_s: 12\n"))
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    stats = (proc.stdout + proc.stderr).split("Job stats")[-1].split("Reasons")[0]
    ran = {ln.split()[0] for ln in stats.splitlines() if ln.strip() and not ln.startswith(("job", "-", "total"))}
    assert "score" in ran and "generate" not in ran, ran


def test_anchor_runner_through_the_gate(smollm_q8, bfcl_wheel, tmp_path, monkeypatch):
    """anchors.evaluate finds BFCL's runner through the Benchmark registry: the anchor model through
    the same items, loop and scorer as every point; an unreachable anchor model is 'unanchored'."""
    from quantladder import anchors

    monkeypatch.chdir(tmp_path)  # the runner keeps its replies under resources/anchors/bfcl/
    entry = {"benchmark": "bfcl", "model": {"path": str(smollm_q8)}, "metric": "accuracy", "subset": "simple_python",
             "published": 0.0, "citation": "test", "tolerance": 100, "gpu_layers": 0,
             "settings": {"source": {"path": str(bfcl_wheel)}, "categories": ["simple_python"], "limit": 1,
                          "max_new_tokens": 8, "n_ctx": 2048}}
    ident = {"label": "cpu", "kind": "cpu"}
    res = anchors.evaluate("bfcl", [entry], ident)
    assert res["status"] == "passed" and res["anchors"][0]["reproduced"] in (0.0, 100.0)
    assert list((tmp_path / "resources/anchors/bfcl").glob("*/generations.jsonl"))
    gone = {**entry, "model": {"path": str(tmp_path / "absent.gguf")}}
    res = anchors.evaluate("bfcl", [gone], ident)
    assert res["status"] == "unanchored" and "absent.gguf" in res["reason"]