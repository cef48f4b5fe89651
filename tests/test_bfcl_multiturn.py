"""BFCL multi-turn: calls run in the sandbox (quantladder.sandbox), the ground truth stays outside it.

Uses the real BFCL data (the bfcl_record fixture of test_bfcl.py), BFCL's own backend classes, the
real sandbox (bubblewrap) and, last, the real embedded model driving one item.
"""

from __future__ import annotations

import json

import pytest

from quantladder.benchmarks.bfcl import data, multiturn

from test_bfcl import bfcl_record, bfcl_wheel  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def executor(bfcl_record):  # noqa: F811
    from quantladder.sandbox import SandboxUnavailable

    try:
        ex = multiturn.SandboxExecutor(bfcl_record["root"], wall_s=60)
        ex.describe()
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox backend on this host: {e}")
    return ex


@pytest.fixture(scope="module")
def base_items(bfcl_record):  # noqa: F811
    return {it["id"]: it for it in data.load_category(bfcl_record["root"], "multi_turn_base")}


def as_model_turns(calls_per_turn):
    """Ground-truth calls written as a model would answer in prompt mode, one step per turn."""
    return {"turns": [["[" + ", ".join(calls) + "]"] for calls in calls_per_turn], "end": "done"}


def test_ground_truth_answers_pass_and_wrong_ones_fail(executor, base_items):
    item = base_items["multi_turn_base_1"]  # file system: ls, mv, grep, tail
    assert multiturn.verdict(item, as_model_turns(item["ground_truth"]), executor)["correct"]
    # one turn's last call left out: the state or the response check must catch it
    short = [calls[:-1] if i == 1 else calls for i, calls in enumerate(item["ground_truth"])]
    v = multiturn.verdict(item, as_model_turns(short), executor)
    assert not v["correct"] and v["error_type"] in ("multi_turn:instance_state_mismatch",
                                                     "multi_turn:execution_response_mismatch")
    # no call at a turn that needs one
    empty = as_model_turns(item["ground_truth"])
    empty["turns"][2] = ["I am done."]
    assert multiturn.verdict(item, empty, executor)["error_type"] == "multi_turn:empty_turn_model_response"
    # fewer turns than the item (force-terminated)
    assert multiturn.verdict(item, {"turns": [["[ls(a=True)]"]], "end": "force_terminated"},
                             executor)["error_type"] == "multi_turn:force_terminated"


def test_other_backends_replay(executor, base_items):
    """Items over several backend classes (messaging, trading, travel, vehicle, tickets, posts)."""
    seen = set()
    for item in base_items.values():
        new = set(item["involved_classes"]) - seen - {"MathAPI"}
        if not new:
            continue
        seen |= set(item["involved_classes"])
        v = multiturn.verdict(item, as_model_turns(item["ground_truth"]), executor)
        # prompt mode drops positional arguments (BFCL's decoder does too), so a ground truth written
        # with them may fail; what must never happen is a sandbox or replay error
        assert v["error_type"] != "multi_turn:sandbox_error", (item["id"], v)
        if len(seen) >= 7:
            break
    assert {"GorillaFileSystem", "MessageAPI", "TradingBot", "TravelAPI", "VehicleControlAPI"} <= seen


def test_ground_truth_is_unreadable_from_the_model_run(executor, base_items, bfcl_record, repo_root):  # noqa: F811
    """The model-driven run gets only the model's calls; host files (answers, project) are not there."""
    item = base_items["multi_turn_base_1"]
    answers = f"{bfcl_record['root']}/data/possible_answer/BFCL_v4_multi_turn_base.json"
    probe = [[[f"open({answers!r}).read()", f"open({str(repo_root / 'config' / 'config.yaml')!r}).read()",
               "__import__('os').listdir('.')", "ls(a=True)"]]]
    out = executor.run(item, probe)
    assert "error" not in out, out
    r_answers, r_config, r_listing, r_ls = out["turns"][0][0]
    assert r_answers.startswith("Error during execution") and "No such file" in r_answers
    assert r_config.startswith("Error during execution") and "No such file" in r_config
    listing = eval(r_listing)  # the sandbox's cwd: the runner, the backend sources, the job, nothing else
    assert set(listing) <= {"runner.py", "job.json", "backend", "standin", "__pycache__"}
    assert "current_directory_content" in r_ls
    gt_text = json.dumps(item["ground_truth"])
    assert gt_text not in json.dumps(executor.base_files)  # nor is it among the files sent in


def test_real_model_drives_one_item(smollm_q8, executor, base_items, bfcl_record):  # noqa: F811
    """SmolLM2 on one real multi-turn item (its first turn): steps generated, calls executed in the
    sandbox, a verdict from the saved record."""
    from quantladder.engine import Engine, EngineSettings

    item = dict(base_items["multi_turn_base_1"])
    item["question"], item["ground_truth"] = item["question"][:1], item["ground_truth"][:1]
    runs0 = executor.runs
    got = {}
    with Engine(str(smollm_q8), EngineSettings(n_ctx=8192)) as engine:
        driver = multiturn.drive_item(engine, bfcl_record["root"], item, executor, max_tokens=24, step_limit=1)
        engine.run([driver], lambda i, rec: got.setdefault(i, rec))  # the generation loop's own call
    rec = got[0]
    assert len(rec["turns"]) == 1 and rec["turns"][0]
    assert rec["end"] in ("done", "force_terminated") and rec["n_prompt_tokens"] > 1000
    steps_with_calls = sum(1 for s in rec["turns"][0] if multiturn.decode_step(s) is not None)
    assert executor.runs - runs0 == steps_with_calls  # every decoded step went through the sandbox
    v = multiturn.verdict(item, rec, executor)
    assert isinstance(v["correct"], bool) and (v["correct"] or v["error_type"].startswith("multi_turn:"))


MT_FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "bfcl" / "parity_multi_turn.json"
MT_CASES = json.loads(MT_FIXTURE.read_text())["cases"]


def test_multi_turn_verdicts_equal_official(executor, bfcl_record):  # noqa: F811
    """Model step outputs derived from real items' ground truth (kept, split, a call dropped, an argument
    changed, a turn of prose) and the official multi_turn_checker's verdicts on them
    (tests/fixtures/bfcl/build_parity_multi_turn.py)."""
    items = {}
    mismatches = []
    for case in MT_CASES:
        if case["category"] not in items:
            items[case["category"]] = {it["id"]: it for it in data.load_category(bfcl_record["root"], case["category"])}
        item = items[case["category"]][case["id"]]
        v = multiturn.verdict(item, {"turns": case["turns"], "end": "done"}, executor)
        if (v["correct"], v["error_type"]) != (case["valid"], case["error_type"]):
            mismatches.append((case["id"], case["variant"], case["valid"], case["error_type"], v))
    assert {c["valid"] for c in MT_CASES} == {True, False}
    assert not mismatches, mismatches



def _printing_reply(payload: bytes) -> str:
    """A reply whose call string prints ``payload`` as the runner's whole output and exits: BFCL
    renders a dict argument's keys unescaped into the call string, so a reply runs Python inside
    the sandbox (contained there, as in BFCL)."""
    key = f"x': __import__('os').write(1, {payload!r}) and __import__('os')._exit(0), 'y"
    return "[ls(a=" + repr({key: 1}) + ")]"


@pytest.mark.parametrize("payload", [b'{"turns": [], "states": []}', b"[" * 100_000],
                         ids=["hollow_result", "nested_past_the_parser"])
def test_a_reply_that_prints_its_own_result_is_a_failure_not_a_crash(executor, base_items, payload):
    """Issue 32: a well-formed but empty result used to crash the verdict (IndexError), and the
    generation loop alike; nesting past the JSON parser's depth raised RecursionError."""
    item = base_items["multi_turn_base_1"]
    hostile = _printing_reply(payload)
    assert "_exit(0)" in multiturn.decode_step(hostile)[0]  # the injection survives the decoder
    rec = as_model_turns(item["ground_truth"])
    rec["turns"][0] = [hostile]
    v = multiturn.verdict(item, rec, executor)
    assert v["correct"] is False and v["error_type"] == "multi_turn:sandbox_error", v
    # what generation sees for that step: an error result per call, not an exception
    out = executor.run(item, [[multiturn.decode_step(hostile)]])
    assert set(out) == {"error"}, out


@pytest.mark.parametrize("out", [
    {"turns": [], "states": []},
    {"turns": [[["ok"]]], "states": [[]]},  # a state that is not an object
    {"turns": [[[1]]], "states": [{}]},  # a result that is not a string
    {"turns": [[["a", "b"]]], "states": [{}]},  # more results than calls
    {"turns": [[["ok"]]], "states": [{"NotInvolved": {}}]},
    {"turns": [[["ok"]]], "states": [{"GorillaFileSystem": []}]},
    [1],
])
def test_malformed_replay_shapes_are_refused(out):
    item = {"involved_classes": ["GorillaFileSystem"]}
    assert multiturn.replay_shape_error(out, item, [[["ls()"]]]) is not None
    assert multiturn.replay_shape_error({"turns": [[["ok"]]], "states": [{"GorillaFileSystem": {}}]},
                                        item, [[["ls()"]]]) is None


LONE_SURROGATE = '[str(object="\\udc80")]'  # the call's result is half a UTF-16 pair: no UTF-8 holds it


def test_a_reply_whose_call_returns_a_lone_surrogate_gets_a_verdict_not_a_crash(smollm_q8, executor, base_items,
                                                                              bfcl_record):  # noqa: F811
    """Issue 41, case 7: `[str(object="\\udc80")]` returned half a surrogate pair, which passed the shape
    check, went into the next prompt as a tool message and stopped generate where the prompt is
    tokenized (UnicodeEncodeError, llama_handle) on every rerun. The model is shown the result escaped
    (as Python's repr shows it), the loop goes on, and the item gets its verdict.

    The real multi-turn driver, engine (chat template, tokenizer), sandbox and verdict; the model's two
    steps are given (the reply, then a step with no call), so no token is decoded."""
    from quantladder.benchmarks.bfcl import prompts
    from quantladder.engine import Engine, EngineSettings, Generation

    item = dict(base_items["multi_turn_base_1"])
    item["question"], item["ground_truth"] = item["question"][:1], item["ground_truth"][:1]
    calls = multiturn.decode_step(LONE_SURROGATE)
    assert calls == ["str(object='\\udc80')"]
    out = executor.run(item, [[calls]])
    assert out["turns"][0][0] == ["\udc80"]  # what the sandbox really returned: the replay keeps it as it is
    assert prompts.tool_messages(out["turns"][0][0], calls)[0]["content"] == "\\udc80"  # what the model is shown
    with Engine(str(smollm_q8), EngineSettings(n_ctx=8192)) as engine:
        driver = multiturn.drive_item(engine, bfcl_record["root"], item, executor, max_tokens=16)
        first = next(driver)
        second = driver.send(Generation(LONE_SURROGATE, len(first.prompt), 9, "stop", 0.0))  # was the crash
        assert second.continues and len(second.prompt) > len(first.prompt)
        assert "\\udc80" in engine.detokenize(second.prompt[len(first.prompt):])
        try:
            driver.send(Generation("I have run it.", len(second.prompt), 5, "stop", 0.0))
        except StopIteration as stop:
            rec = stop.value
    assert rec["turns"] == [[LONE_SURROGATE, "I have run it."]] and rec["end"] == "done"
    json.dumps(rec, ensure_ascii=False).encode("utf-8")  # the record is text a generations file can hold
    v = multiturn.verdict(item, rec, executor)
    assert v["correct"] is False and v["error_type"].startswith("multi_turn:"), v
    json.dumps(v, ensure_ascii=False).encode("utf-8")
