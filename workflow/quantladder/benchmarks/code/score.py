"""Scoring for the code suites (scoring-host side): every program runs in the sandbox, never here.

A verdict per item: ``{"item_id", "correct", "error_type", "subset", "degenerate", ...}`` where
error_type is one of

    syntax        the program does not compile
    test_failure  a test assertion failed
    runtime_error another exception escaped (NameError, TypeError, ...)
    early_exit    the program exited before its tests finished
    timeout       wall-clock or CPU-time limit
    memory        address-space limit (MemoryError) or killed for memory
    violation     the sandbox refused something: network, a write outside the work dir, a full
                  disk, the process limit, the file-size limit
    sandbox_error the sandbox itself failed (counted, and reported, as a failure)
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Callable, Iterable

from ... import sandbox
from .extract import bigcodebench_program, bigcodebench_solution, humaneval_completion

# Bumped when a change here changes a verdict (Snakemake does not track imported modules).
SCORER_VERSION = "code-4"  # code-2: the verdict is decided outside the model's process; code-3: the test module's names out of the solution's reach, malformed verdict lines are sandbox errors; code-4: a program's SIGINT to the harness no longer ends it
# The harness's failure kinds (a verdict line naming another is malformed: the item's sandbox_error).
ERROR_TYPES = ("syntax", "test_failure", "runtime_error", "early_exit", "timeout", "memory", "violation",
               "sandbox_error")
_RESULT = re.compile(r"@@QL_RESULT@@ (\S+) (\{.*\})\s*$", re.M)


def runner_source() -> str:
    return resources.files(__package__).joinpath("_runner.py").read_text()


@dataclass
class ScoreSettings:
    backend: str = "bubblewrap"
    python: str | None = None  # interpreter inside the sandbox; None: this Python's base interpreter
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    extra_ro_binds: tuple = ()

    @classmethod
    def from_config(cls, section: dict) -> "ScoreSettings":
        """From a benchmark's resolved settings (its schema's defaults filled: no default is written here)."""
        sb = section["sandbox"]
        timeout = float(section["timeout_s"])
        lim = sandbox.Limits(
            wall_s=timeout, cpu_s=max(1, math.ceil(timeout)),
            address_space_bytes=int(sb["address_space_mb"]) << 20,
            nproc=int(sb["nproc"]), file_size_bytes=int(sb["file_size_mb"]) << 20,
            open_files=int(sb["open_files"]), output_bytes=int(sb["output_kb"]) << 10,
            disk_bytes=int(sb["disk_mb"]) << 20, memory_bytes=int(sb["memory_mb"]) << 20)
        return cls(backend=sb["backend"], python=sb.get("python"), limits=lim,
                   extra_ro_binds=tuple(sb["extra_ro_binds"]))


@dataclass(frozen=True)
class Program:
    """What the in-sandbox harness runs for one reply (docs/sandbox.md).

    ``solution`` is the model's code as its suite executes it (HumanEval: prompt + completion;
    BigCodeBench: the calibrated solution). ``test`` is the task's test code: in script mode it runs in
    the harness's own process, with ``prompt`` (whose helpers HumanEval's tests call), and the
    model's process never sees it; in unittest mode it runs beside the solution, as BigCodeBench's
    tests patch the modules the solution uses.
    """

    mode: str  # script (HumanEval) | unittest (BigCodeBench)
    solution: str
    test: str
    entry_point: str
    prompt: str = ""

    def text(self) -> str:
        """The one program the suite's own executor would run (human-eval / BigCodeBench)."""
        if self.mode == "script":
            return self.solution + "\n" + self.test + "\n" + f"check({self.entry_point})"
        return bigcodebench_program(self.solution, self.test)


def program_for(item, code: str) -> tuple[str, Program]:
    """(solution text, the program the sandbox runs) for a reply's extracted code."""
    if item.mode == "script":
        completion = humaneval_completion(item.prefix, code, item.entry_point)
        return completion, Program("script", item.prefix + completion, item.test, item.entry_point, item.prefix)
    solution = bigcodebench_solution(item.prefix, code, item.entry_point)
    return solution, Program("unittest", solution, item.test, item.entry_point)


def _imports(source: str) -> list[str]:
    """The modules a task's prompt imports at its top level (the harness loads them before it forks,
    so that its two processes do not each pay for them)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return sorted({n for n in names if n.replace(".", "").replace("_", "").isalnum()})


_runner: list[str] = []


def run_program(program: Program, settings: ScoreSettings, *legacy) -> dict:
    """Run one program in the sandbox; returns {passed, error_type, detail, wall_s, sandbox_kind}.

    The verdict is the harness's result line, which only the harness's own process can write: the
    model's code runs in a child that holds neither fd 1 nor the nonce (see _runner.py). The older
    call shape ``run_program(program, mode, settings)`` is accepted (the mode is the program's).
    """
    if isinstance(settings, str) and legacy:
        settings = legacy[0]
    if not isinstance(program, Program) or not isinstance(settings, ScoreSettings):
        raise TypeError("run_program(program, settings) takes a score.Program (score.program_for builds it: the "
                        "tests apart from the model's code, so that they run outside its process) and ScoreSettings")
    if not _runner:
        _runner.append(runner_source())
    if settings.backend.startswith("apptainer"):
        interp = sandbox.Interpreter(settings.python or "python3")
    else:
        interp = sandbox.host_python(settings.python)
    nonce = secrets.token_hex(16)
    job = {"program": "program.py", "entry_point": program.entry_point, "test": program.test,
           "prompt": program.prompt}
    files = {"runner.py": _runner[0], "program.py": program.solution, ".nonce": nonce, "job.json": json.dumps(job)}
    # HumanEval needs the standard library only: -S and the hidden site directories keep every
    # site-packages out (a reply importing numpy fails here, as HumanEval's protocol intends);
    # BigCodeBench needs its scoring env's site.
    flags = ["-I", "-S"] if program.mode == "script" else ["-I"]
    res = sandbox.run_sandboxed([interp.exe, *flags, "-u", "/work/runner.py", program.mode,
                                 *_imports(program.prompt)], files,
                                settings.limits, backend=settings.backend,
                                extra_ro_binds=list(interp.ro_binds) + list(settings.extra_ro_binds),
                                hidden=interp.hidden, as_init=True)
    out = {"passed": False, "error_type": None, "detail": "", "wall_s": round(res.wall_s, 4),
           "sandbox_kind": res.kind}
    found = [m for m in _RESULT.finditer(res.stdout) if m.group(1) == nonce]
    if len(found) == 1 and not res.timed_out:
        r = harness_verdict(found[0].group(2))
        if isinstance(r, str):
            out.update(error_type="sandbox_error", detail=r)
            return out
        out.update(passed=r["passed"], error_type=None if r["passed"] else (r["kind"] or "runtime_error"),
                   detail=r["detail"])
        if not out["passed"] and res.oom_kills:  # a process died for memory: that is why it failed
            out.update(error_type="memory", detail=f"{res.oom_kills} process(es) killed at the memory limit; "
                                                   + out["detail"])
        return out
    # No verdict line: the harness itself was stopped (the wall-clock limit, or the memory cgroup).
    if res.kind == "timeout":
        kind = "timeout"
    elif res.kind in ("memory", "violation", "sandbox_error"):
        kind = res.kind
    elif res.oom_kills:
        kind = "memory"
    else:
        kind = "sandbox_error"
    out.update(error_type=kind, detail=(res.detail or res.stderr.strip()[-300:] or "the harness wrote no verdict"))
    return out


def harness_verdict(text: str) -> dict | str:
    """The harness's result object, checked for the shape the host relies on; a str says what is
    wrong with it (the item then fails as ``sandbox_error``, never a crash of the rule)."""
    try:
        r = json.loads(text)
    except (ValueError, RecursionError):
        return f"the harness's verdict is not JSON: {text[:200]!r}"
    if type(r) is not dict or type(r.get("passed")) is not bool or type(r.get("detail", "")) is not str:
        return f"the harness's verdict is malformed: {text[:200]!r}"
    kind = r.get("kind")
    if (kind is not None and kind not in ERROR_TYPES) or (r["passed"] and kind is not None):
        return f"the harness's verdict has an unknown failure kind: {str(kind)[:100]!r}"
    return {"passed": r["passed"], "kind": kind, "detail": r.get("detail", "")[:2000]}


def score_generations(items: Iterable, generations: list[dict], settings: ScoreSettings, threads: int = 1,
                      on_verdict: Callable[[dict], None] | None = None, skip: set[str] = frozenset()) -> list[dict]:
    """Score every generation whose item is known, ``threads`` sandboxes at a time, in item order."""
    items = list(items)
    by_id = {it.item_id: it for it in items}
    order = {it.item_id: i for i, it in enumerate(items)}
    todo = sorted((g for g in generations if g["item_id"] in by_id and g["item_id"] not in skip),
                  key=lambda g: order[g["item_id"]])  # verdicts in item order, whatever order replies came
    lock = threading.Lock()

    def one(g):
        item = by_id[g["item_id"]]
        _, program = program_for(item, g.get("code", ""))
        r = run_program(program, settings)
        v = {"item_id": item.item_id, "task_id": item.task_id, "correct": r["passed"], "error_type": r["error_type"],
             "subset": item.subset, "degenerate": bool(g.get("degenerate")), "detail": r["detail"][:500],
             "wall_s": r["wall_s"], "sandbox_kind": r["sandbox_kind"]}
        if on_verdict:
            with lock:
                on_verdict(v)
        return v

    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        return list(ex.map(one, todo))
