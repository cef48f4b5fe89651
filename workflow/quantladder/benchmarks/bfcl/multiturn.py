"""BFCL multi-turn: the model drives BFCL's backend classes turn by turn; calls run only in the sandbox.

Generation (BFCL's prompting-mode loop, bfcl-eval model_handler/base_handler.py): per turn the user
message is added (for miss_func, the held-out function docs are offered at their turn), then the
model is queried step after step; each step's decoded calls are executed and their results go back
as tool messages, until a step has no decodable call. More than ``step_limit`` steps in one turn
force-terminates the item (BFCL's MAXIMUM_STEP_LIMIT is 20).

Execution is a sandbox run of :mod:`sandbox_runner` that replays the calls so far from the initial
config. The model-driven run is given the model's calls only; the ground truth is read on the host
and executed in a run of its own at scoring time, never next to model calls.

Scoring (BFCL's multi_turn_checker), per turn with ground-truth calls: the model must have made a
call; every involved instance's public state must equal the ground truth's (state check); every
ground-truth result of the turn must appear among the model's results so far (response check).
Both checks compare plain JSON snapshots on the host, after the sandbox runs.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from ... import sandbox as qsandbox
from ...engine import Request
from ...loops import is_degenerate
from ...reasoning import THINKING_CAP
from ..base import reply_plan
from . import parse, prompts
from .data import backend_sources

PKG_DIR = "backend/bfcl_eval/eval_checker/multi_turn_eval/func_source_code"
HERE = Path(__file__).resolve().parent


# Where the mpmath package (the one import of BFCL's backends outside the standard library) appears
# inside the sandbox, bound read-only by itself.
SANDBOX_LIB = "/opt/quantladder/pylib"


class SandboxExecutor:
    """Replays calls against BFCL's backend classes inside ``quantladder.sandbox``.

    The sandbox sees only what the backends need: the standard library (the stdlib-only view of the
    base interpreter, ``sandbox.host_python()``: no site-packages, so neither this project's venv nor
    another benchmark's data, answers or solutions), BFCL's backend sources (copied in per run) and
    mpmath, bound read-only by itself at ``SANDBOX_LIB``. With ``python`` (a scoring interpreter of the
    site's own) that interpreter's environment is what the sandbox sees instead.
    """

    def __init__(self, root: str | Path, *, backend: str = "bubblewrap", python: str | None = None,
                 wall_s: float = 30.0):
        self.backend = backend
        self.interp = qsandbox.host_python(python)
        self.python = self.interp.exe
        self.binds = list(self.interp.ro_binds)
        self.pythonpath: list[str] = []
        self.flags = ["-I"] if python else ["-I", "-S"]
        spec = importlib.util.find_spec("mpmath") if python is None else None
        self.mpmath = None
        if spec is not None and spec.submodule_search_locations:
            # BFCL's MathAPI uses mpmath: with the real package its results are exactly BFCL's
            # (otherwise the stand-in, see mpmath_standin.py).
            self.mpmath = str(Path(list(spec.submodule_search_locations)[0]).resolve())
            self.binds.append(f"{self.mpmath}:{SANDBOX_LIB}/mpmath")
            self.pythonpath.append(SANDBOX_LIB)
        self.limits = qsandbox.Limits(wall_s=wall_s, cpu_s=int(wall_s))
        self.base_files: dict[str, str] = {"runner.py": (HERE / "sandbox_runner.py").read_text(),
                                           "standin/mpmath.py": (HERE / "mpmath_standin.py").read_text()}
        parts = PKG_DIR.split("/")
        for i in range(2, len(parts) + 1):
            self.base_files["/".join(parts[:i]) + "/__init__.py"] = ""
        for name, text in backend_sources(root).items():
            self.base_files[f"{PKG_DIR}/{name}"] = text
        self.runs = 0

    def describe(self) -> dict:
        return {"backend": qsandbox.check_backend(self.backend), "python": self.python,
                "mpmath": "bound read-only" if self.mpmath else "stand-in", "wall_s": self.limits.wall_s}

    def run(self, item: dict, turns: list[list[list[str]]]) -> dict:
        """Execute ``turns`` (turns of steps of call strings); results and end-of-turn states.

        Only the item's involved classes, initial config and the given calls enter the sandbox.
        """
        job = {"involved_classes": item["involved_classes"], "initial_config": item.get("initial_config", {}),
               "long_context": "long_context" in item["category"], "turns": turns, "pythonpath": self.pythonpath}
        files = dict(self.base_files)
        files["job.json"] = json.dumps(job)
        res = qsandbox.run_sandboxed([self.python, *self.flags, "runner.py"], files, self.limits,
                                     backend=self.backend, extra_ro_binds=self.binds, hidden=self.interp.hidden)
        self.runs += 1
        if res.kind != "ok":
            return {"error": f"sandbox {res.kind}: {res.stderr.strip()[-400:]}"}
        try:
            out = json.loads(res.stdout)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return {"error": f"sandbox output is not JSON: {res.stdout[:200]!r}"}
        problem = replay_shape_error(out, item, turns)
        return {"error": f"malformed sandbox result: {problem}"} if problem else out


def replay_shape_error(out, item: dict, turns: list[list[list[str]]]) -> str | None:
    """What is wrong with a replay's output, or None when it has the shape the host relies on.

    The call strings run Python inside the sandbox (BFCL builds them from the reply), and that code
    shares the runner's stdout: it can print any JSON and exit. So the host trusts nothing of it
    beyond this: one result string per call sent, per step and turn, and per turn a dict from involved
    classes to dicts of their public fields.
    """
    if type(out) is not dict or type(out.get("turns")) is not list or type(out.get("states")) is not list:
        return "not an object with lists 'turns' and 'states'"
    if len(out["turns"]) != len(turns) or len(out["states"]) != len(turns):
        return f"{len(out['turns'])} turns and {len(out['states'])} states for {len(turns)} turns sent"
    for t, (got, sent) in enumerate(zip(out["turns"], turns)):
        if type(got) is not list or len(got) != len(sent):
            return f"turn {t}: not one result list per step sent"
        for s, (results, calls) in enumerate(zip(got, sent)):
            if type(results) is not list or len(results) != len(calls) \
                    or any(type(r) is not str for r in results):
                return f"turn {t} step {s}: not one result string per call sent"
    for t, states in enumerate(out["states"]):
        if type(states) is not dict or not set(states) <= set(item["involved_classes"]) \
                or any(type(v) is not dict for v in states.values()):
            return f"turn {t}: not a state object per involved class"
    return None


def decode_step(text: str) -> list[str] | None:
    """A step's calls as execution strings; None when the step holds no decodable call."""
    try:
        calls = parse.to_execution_strings(parse.decode(text, "python"))
    except parse.DecodeError:
        return None
    if not calls or (len(calls) == 1 and not calls[0]):
        return None
    return calls


def drive_item(engine, root, item: dict, executor: SandboxExecutor, *, max_tokens: int, step_limit: int = 20):
    """One multi-turn item as a driver of the generation loop (quantladder.generation): yields a
    Request per model step, executes the step's calls in the sandbox, returns the generation
    record (no verdict). A step whose prompt no longer fits the context ends the item
    (``prompt_too_long``), as BFCL's own loop stops on a context error."""
    t0 = time.perf_counter()
    messages = prompts.first_messages(root, item)
    missed = item.get("missed_function") or {}
    turns_text: list[list[str]] = []
    executed: list[list[list[str]]] = []
    n_prompt = n_gen = n_steps = n_kept = 0
    end = "done"
    degenerate = False
    runs0 = executor.runs
    steps: list[dict] = []  # a thinking family's split of each step (Generation.reasoning)
    full_text: list[str] = []  # and each step's whole reply
    for t, turn_msgs in enumerate(item["question"]):
        if str(t) in missed:
            turn_msgs = [prompts.added_functions_message(root, missed[str(t)])]
        if t > 0:
            messages.extend(turn_msgs)
        steps_text: list[str] = []
        executed.append([])
        count = 0
        while True:
            prompt = engine.chat_prompt(messages)
            # every step after the item's first continues its sequence: the conversation so far
            # stays in the KV cache and only the new messages are decoded (Request.continues)
            gen = yield Request(engine.prompt_tokens(prompt), int(max_tokens), continues=bool(n_steps),
                                reasoning=reply_plan(engine, prompt))
            n_steps += 1
            if gen.finish_reason == "prompt_too_long":
                end = "prompt_too_long"
                break
            n_prompt += gen.n_prompt_tokens
            n_kept += gen.n_kept_tokens
            n_gen += gen.n_gen_tokens
            degenerate = degenerate or is_degenerate(gen.text, gen.n_gen_tokens, gen.finish_reason)
            if gen.reasoning is not None:  # a thinking family: the step's answer is what BFCL reads
                steps.append(gen.reasoning)
                full_text.append(gen.text)
                if not gen.reasoning["thinking_closed"]:
                    end = THINKING_CAP  # no answer: the item ends here, its verdict says why
                    break
                # the turn goes back into the conversation as the server replays it: the answer as
                # its content, the thinking as its reasoning_content (the template keeps or drops it)
                messages.append({"role": "assistant", "content": gen.answer,
                                 **({"reasoning_content": gen.reasoning["reasoning"]}
                                    if gen.reasoning["reasoning"] else {})})
            else:
                messages.append({"role": "assistant", "content": gen.text})
            steps_text.append(gen.answer)
            calls = decode_step(gen.answer)
            if calls is None:
                break
            executed[-1].append(calls)
            out = executor.run(item, executed)
            if "error" in out:
                results = [f"Error during execution: {out['error']}"] * len(calls)
            else:
                results = out["turns"][-1][-1]
            messages.extend(prompts.tool_messages(results, calls))
            count += 1
            if count > step_limit:
                end = "force_terminated"
                break
        turns_text.append(steps_text)
        if end != "done":
            break
    rec = {"turns": turns_text, "end": end, "text": "\n".join(s for turn in turns_text for s in turn),
           "n_prompt_tokens": n_prompt, "n_kept_tokens": n_kept, "n_gen_tokens": n_gen, "finish_reason": end,
           "seconds": round(time.perf_counter() - t0, 4), "degenerate": degenerate,
           "sandbox_runs": executor.runs - runs0}
    if steps:  # a thinking family: ``turns`` holds each step's answer; the item's split sums its steps'
        rec["text"] = "\n".join(full_text)
        rec.update(merge_steps(steps, turns_text))
    return rec


def merge_steps(steps: list[dict], turns_text: list[list[str]]) -> dict:
    """A multi-turn item's split from its steps' (quantladder.reasoning's record fields): the
    thinking of every step, the answers as ``turns`` holds them, the tokens summed, closed only when
    every step's thinking closed, forced when any step's was, and the last step's ending."""
    last = steps[-1]
    thought = [s for s in steps if s["thinking_end"] is not None]
    closed = all(s["thinking_closed"] for s in steps)
    forced = any(s["thinking_forced"] for s in steps)
    if not closed:
        end = last["thinking_end"]
    elif any(s["thinking_end"] == "budget" for s in steps):
        end = "budget"
    else:
        end = "model" if thought else None
    return {"reasoning_format": last["reasoning_format"],
            "reasoning": "\n".join(s["reasoning"] for s in steps if s["reasoning"]),
            "answer": "\n".join(a for turn in turns_text for a in turn),
            "thinking_tokens": sum(s["thinking_tokens"] for s in steps),
            "answer_tokens": sum(s["answer_tokens"] for s in steps),
            "thinking_closed": closed,
            "thinking_self_closed": bool(thought) and all(s["thinking_end"] == "model" for s in thought),
            "thinking_forced": forced, "thinking_end": end,
            "thinking_budget": last["thinking_budget"], "thinking_steps": len(steps)}


def _unordered_contains(needles: list, hay: list) -> tuple[bool, list]:
    pool = list(hay)
    missing = []
    for x in needles:
        try:
            pool.remove(x)
        except ValueError:
            missing.append(x)
    return not missing, missing


def verdict(item: dict, rec: dict, executor: SandboxExecutor) -> dict:
    """BFCL's multi-turn verdict from a saved generation record."""
    gt: list[list[str]] = item["ground_truth"]
    turns = rec.get("turns") or []
    # As in BFCL, a run cut short (step limit, context) fails when turns are missing; cut short
    # in its last turn, it is judged on what it did.
    if len(turns) != len(gt):
        return {"correct": False, "error_type": "multi_turn:force_terminated", "parse_failed": False,
                "detail": f"{len(turns)} turns generated for {len(gt)} ({rec.get('end')})"}
    model_turns = [[c for c in (decode_step(s) for s in steps) if c is not None] for steps in turns]
    parse_failed = all(not steps for steps in model_turns) and any(gt)
    model = executor.run(item, model_turns)
    truth = executor.run(item, [[calls] for calls in gt])
    for name, out in (("model", model), ("ground truth", truth)):
        if "error" in out:
            return {"correct": False, "error_type": "multi_turn:sandbox_error", "parse_failed": parse_failed,
                    "detail": f"{name} replay: {out['error']}"}
    model_results_so_far: list[str] = []
    for t, gt_calls in enumerate(gt):
        for step in model["turns"][t]:
            model_results_so_far.extend(step)
        if not gt_calls:
            continue
        if not model_turns[t]:
            return {"correct": False, "error_type": "multi_turn:empty_turn_model_response",
                    "parse_failed": parse_failed, "detail": f"turn {t}"}
        for cls, want in truth["states"][t].items():
            got = model["states"][t].get(cls, {})
            diff = sorted(k for k in want if k != "__class__" and got.get(k) != want[k])
            if diff:
                return {"correct": False, "error_type": "multi_turn:instance_state_mismatch",
                        "parse_failed": parse_failed, "detail": f"turn {t}: {cls} differs in {diff}"}
        ok, missing = _unordered_contains(truth["turns"][t][0], model_results_so_far)
        if not ok:
            return {"correct": False, "error_type": "multi_turn:execution_response_mismatch",
                    "parse_failed": parse_failed, "detail": f"turn {t}: missing {str(missing)[:300]}"}
    return {"correct": True, "error_type": None, "parse_failed": False}
