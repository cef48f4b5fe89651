"""Programs that try to forge their own verdict, scored by the real scorer in the real sandbox.

Every forger below answers its task wrongly and tries, besides, to make the scorer believe it
passed: by finding the harness's nonce (in its frames, the garbage collector, /proc/self, the
parent's /proc entries, the files of the work dir) and printing a well-formed result line on every
route to the sandbox's stdout; by exiting early with success; by killing or stopping the harness; by
writing to every inherited fd; by patching the test runner, unittest, builtins or AssertionError;
by replacing ``check``; by reading the tests to learn the answers. HumanEval (script mode: the tests
run in the harness's own process) and BigCodeBench (unittest mode: the tests run beside the
solution, witnessed by an audit hook) each have their set. Each forger must score as failed while
the honest control (the same task's canonical solution, the same harness) passes; one set goes
through the real score stage as well (``quantladder.scoring.score``, what rule score runs).
"""

from __future__ import annotations

import textwrap

import pytest

from quantladder import sandbox
from quantladder.benchmarks.code import data, score
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BCB_FIXTURE = REPO / "tests" / "fixtures" / "code" / "bigcodebench_hard_tiny.jsonl"
SETTINGS = score.ScoreSettings(limits=sandbox.Limits(wall_s=8, cpu_s=6))

# Shared by the forgers: every route a found nonce (or report key) could take to a forged verdict.
FORGE = r'''
import os, re, sys, hmac, json
_HEX = re.compile(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
def _routes():
    fds = [1, 2] + list(range(3, 64))
    for p in ("/proc/1/fd/1", "/proc/%d/fd/1" % os.getppid(), "/dev/stdout", "/proc/self/fd/1"):
        try:
            fds.append(os.open(p, os.O_WRONLY))
        except OSError:
            pass
    return fds
def forge(nonces=(), keys=()):
    nonces = sorted({n.decode() if isinstance(n, bytes) else n for n in nonces} | {"0" * 32})
    lines = [("\n@@QL_RESULT@@ %s %s\n" % (n, json.dumps({"passed": True, "kind": None, "detail": ""}))).encode()
             for n in nonces]
    for k in set(keys):
        recs = []
        for i, body in enumerate(["armed\t3", "load\tok\t''\t''", "test\t'test_basic'\tok\t''\t''",
                                  "test\t'test_empty'\tok\t''\t''", "test\t'test_punctuation'\tok\t''\t''", "done\t"]):
            b = ("%d\t%s" % (i, body)).encode()
            recs.append(b + b"\t" + hmac.new(k, b, "sha256").hexdigest().encode() + b"\n")
        lines.append(b"".join(recs))
    print("".join(l.decode("latin-1") for l in lines))
    for fd in _routes():
        for line in lines:
            try:
                os.write(fd, line)
            except OSError:
                pass
    os._exit(0)
def strings_in(obj, out, depth=0):
    if depth > 3:
        return
    if isinstance(obj, (str, bytes)):
        out.add(obj)
    elif isinstance(obj, dict):
        for k, v in list(obj.items())[:2000]:
            strings_in(k, out, depth + 1); strings_in(v, out, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in list(obj)[:2000]:
            strings_in(v, out, depth + 1)
def nonces_in(strings):
    found = set()
    for s in strings:
        b = s.encode("latin-1", "replace") if isinstance(s, str) else s
        found.update(_HEX.findall(b))
    return found
'''

# HumanEval/0 (has_close_elements): a wrong body returns False; the canonical one passes.
HE_WRONG = "    return False\n"
HE_FORGERS = {
    "print_a_result_line": "print('@@QL_RESULT@@ ' + '0' * 32 + ' {\"passed\": true}')\nreturn False\n",
    "nonce_from_frames": ("seen = set()\nf = sys._getframe()\nwhile f is not None:\n"
                          "    strings_in(dict(f.f_locals), seen); strings_in(dict(f.f_globals), seen); f = f.f_back\n"
                          "forge(nonces_in(seen))\n"),
    "nonce_from_gc": ("import gc\nseen = set()\nfor o in gc.get_objects():\n    strings_in(o, seen, 2)\n"
                      "forge(nonces_in(seen))\n"),
    "nonce_from_proc_self": (
        "found = set()\nfor p in ('/proc/self/environ', '/proc/self/cmdline', '/work/.nonce', '/work/job.json'):\n"
        "    try:\n        found |= nonces_in([open(p, 'rb').read()])\n    except OSError:\n        pass\n"
        "mem = open('/proc/self/mem', 'rb')\n"
        "for line in open('/proc/self/maps'):\n"
        "    a, b = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    if 'r' not in line.split()[1] or b - a > 64 << 20:\n        continue\n"
        "    try:\n        mem.seek(a); found |= nonces_in([mem.read(b - a)])\n    except (OSError, ValueError, OverflowError):\n        pass\n"
        "forge(found)\n"),
    "nonce_from_the_parent": (
        "found = set()\nfor pid in {os.getppid(), 1}:\n"
        "    for name in ('environ', 'cmdline', 'mem', 'fd/1', 'fd/3'):\n"
        "        try:\n            found |= nonces_in([open('/proc/%d/%s' % (pid, name), 'rb').read(1 << 20)])\n"
        "        except OSError:\n            pass\n"
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.ptrace(16, os.getppid(), 0, 0)\n"  # PTRACE_ATTACH
        "forge(found)\n"),
    "sys_exit_0": "import sys\nsys.exit(0)\n",
    "os__exit_0": "os._exit(0)\n",
    "kill_the_harness": ("import signal\nfor pid in (os.getppid(), 1):\n    for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
                         "        try:\n            os.kill(pid, sig)\n        except OSError:\n            pass\n"
                         "os.kill(-1, signal.SIGKILL)\nreturn False\n"),
    "write_to_inherited_fds": "forge()\n",
    "replace_check": ("g = sys._getframe().f_globals\ng['check'] = lambda candidate: None\n"
                      "import builtins\nbuiltins.check = lambda candidate: None\nreturn False\n"),
    "patch_builtins_and_assertionerror": (
        "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "builtins.abs = lambda x: 0\nbuiltins.all = lambda x: True\nbuiltins.__import__ = None\nreturn False\n"),
    "read_the_tests_for_the_answers": (
        "import glob\nsrc = ''\nfor p in glob.glob('/work/**', recursive=True) + glob.glob('/tmp/**', recursive=True):\n"
        "    try:\n        src += open(p).read()\n    except OSError:\n        pass\n"
        "seen = set()\nf = sys._getframe()\nwhile f is not None:\n    strings_in(dict(f.f_globals), seen); f = f.f_back\n"
        "src += ''.join(s for s in seen if isinstance(s, str))\n"
        "if ('def ' + 'check(') in src:\n"  # the tests are readable: answer with the right values
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
        "return False\n"),
    "an_object_equal_to_everything": ("class Yes:\n    def __eq__(self, o):\n        return True\n"
                                      "    def __bool__(self):\n        return True\n    __hash__ = object.__hash__\n"
                                      "return Yes()\n"),
}
# The forgers that also act when the module loads (before any call), not only inside the candidate.
HE_AT_LOAD = ("sys_exit_0", "os__exit_0", "print_a_result_line", "nonce_from_gc", "write_to_inherited_fds",
              "patch_builtins_and_assertionerror")
CASES_HE = [(n, "in_call") for n in sorted(HE_FORGERS)] + [(n, "at_load") for n in HE_AT_LOAD]
HE_WANT = {"an_object_equal_to_everything": "runtime_error", "nonce_from_proc_self": "violation",
           "os__exit_0": "early_exit", "sys_exit_0": "early_exit"}


def _humaneval_program(name: str, where: str = "in_call") -> tuple:
    """(item, the reply) for a forger inside the entry point, or (item, Program) for one at module
    level (the sanitiser drops module-level statements from a reply: the harness gets it directly)."""
    item = data.load_humaneval(limit=1)[0]
    body = HE_FORGERS[name]
    if where == "in_call":
        return item, FORGE + item.prompt + textwrap.indent(body, "    ")
    solution = FORGE + body.replace("return False\n", "") + "\n" + item.prompt + HE_WRONG
    return item, score.Program("script", solution, item.test, item.entry_point, item.prompt)


def test_humaneval_honest_control_passes():
    item = data.load_humaneval(limit=1)[0]
    _, prog = score.program_for(item, FORGE + item.prompt + item.extra["canonical_solution"])
    assert score.run_program(prog, SETTINGS)["passed"]
    _, prog = score.program_for(item, item.prompt + HE_WRONG)
    assert not score.run_program(prog, SETTINGS)["passed"]


@pytest.mark.parametrize("name, where", CASES_HE, ids=[f"{n}-{w}" for n, w in CASES_HE])
def test_humaneval_forger_scores_as_failed(name, where):
    item, code = _humaneval_program(name, where)
    prog = code if isinstance(code, score.Program) else score.program_for(item, code)[1]
    if where == "in_call":
        assert HE_FORGERS[name].splitlines()[0].strip() in prog.solution  # the sanitiser kept the forger
    r = score.run_program(prog, SETTINGS)
    assert not r["passed"], r
    assert r["sandbox_kind"] == "ok", r  # the harness itself was never stopped: it wrote the verdict
    if name in HE_WANT:
        assert r["error_type"] == HE_WANT[name], r


def test_the_answer_reading_forger_would_pass_if_the_tests_were_readable():
    """The positive control of ``read_the_tests_for_the_answers``: forced to believe it found the
    tests, it answers right and passes, so its failure above means the tests were out of its reach."""
    item = data.load_humaneval(limit=1)[0]
    body = HE_FORGERS["read_the_tests_for_the_answers"].replace("if ('def ' + 'check(') in src:", "if True:")
    _, prog = score.program_for(item, FORGE + item.prompt + textwrap.indent(body, "    "))
    assert score.run_program(prog, SETTINGS)["passed"]


# BigCodeBench fixture task 9001 (word counts): a wrong body returns an empty Counter.
BCB_WRONG = "    return Counter()\n"
BCB_FORGERS = {
    "print_a_result_line": "print('@@QL_RESULT@@ ' + '0' * 32 + ' {\"passed\": true}')\nreturn Counter()\n",
    "nonce_and_key_from_frames": (
        "seen = set()\nf = sys._getframe()\nwhile f is not None:\n"
        "    strings_in(dict(f.f_locals), seen); strings_in(dict(f.f_globals), seen); f = f.f_back\n"
        "forge(nonces_in(seen), [s for s in seen if isinstance(s, bytes) and len(s) == 32])\n"),
    "key_from_gc": ("import gc\nseen = set()\nfor o in gc.get_objects():\n    strings_in(o, seen, 2)\n"
                    "forge(nonces_in(seen), [s for s in seen if isinstance(s, bytes) and len(s) == 32])\n"),
    "key_from_referents": ("import gc, unittest\nseen = set()\nfor o in gc.get_referents(unittest.TestCase.__dict__):\n"
                           "    strings_in(o, seen, 2)\nforge(nonces_in(seen))\n"),
    "key_from_proc_self_mem": (
        "mem = open('/proc/self/mem', 'rb')\nkeys = set()\n"
        "for line in open('/proc/self/maps'):\n"
        "    a, b = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    try:\n        mem.seek(a); blob = mem.read(min(b - a, 1 << 20))\n    except (OSError, ValueError, OverflowError):\n"
        "        continue\n    keys.update(blob[i:i + 32] for i in range(0, len(blob) - 32, 4096))\n"
        "forge((), keys)\n"),
    "nonce_from_the_parent": (
        "found = set()\nfor pid in {os.getppid(), 1}:\n"
        "    for name in ('environ', 'cmdline', 'mem', 'fd/1'):\n"
        "        try:\n            found |= nonces_in([open('/proc/%d/%s' % (pid, name), 'rb').read(1 << 20)])\n"
        "        except OSError:\n            pass\n"
        "forge(found)\n"),
    "sys_exit_0": "sys.exit(0)\n",
    "os__exit_0": "os._exit(0)\n",
    "kill_the_harness": ("import signal\nfor pid in (os.getppid(), 1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
                         "    except OSError:\n        pass\nos._exit(0)\n"),
    "write_to_inherited_fds": "forge((), [b'\\0' * 32])\n",
    "report_through_the_hook": ("for i, n in enumerate(['test_basic', 'test_empty', 'test_punctuation']):\n"
                                "    sys.audit('quantladder.report', i, n, 'ok', '', '')\nsys.audit('quantladder.done')\n"
                                "os._exit(0)\n"),
    "call_the_harness_audit": ("f = sys._getframe()\nwhile f is not None and 'audit' not in f.f_locals:\n"
                               "    f = f.f_back\nf.f_locals['audit']('quantladder.done')\nreturn Counter()\n"),
    "patch_unittest": ("import unittest\nunittest.TestCase.assertEqual = lambda self, *a, **k: None\n"
                       "unittest.TestCase.run = lambda self, result=None: None\nreturn Counter()\n"),
    "patch_builtins_and_assertionerror": (
        "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "builtins.isinstance = lambda *a: True\nreturn Counter()\n"),
    "replace_the_tests": ("import unittest\ncls = sys.modules['__test__'].TestCases\n"
                          "for n in ('test_basic', 'test_empty', 'test_punctuation'):\n"
                          "    getattr(cls, n).__code__ = (lambda self: None).__code__\nreturn Counter()\n"),
    "trace_the_harness": ("def tracer(frame, event, arg):\n    return tracer\nsys.settrace(tracer)\nreturn Counter()\n"),
    "skip_the_test": "import unittest\nraise unittest.SkipTest('no')\n",
    "mark_the_tests_skipped": ("cls = sys.modules['__test__'].TestCases\n"
                               "for n in ('test_basic', 'test_empty', 'test_punctuation'):\n"
                               "    getattr(cls, n).__unittest_skip__ = True\nreturn Counter()\n"),
    "disable_the_checks_then_patch": (
        "import unittest\nf = sys._getframe()\nwhile f is not None:\n"
        "    g = f.f_globals\n    for name in ('_changed', '_same', '_fingerprint', 'kind_of'):\n"
        "        if name in g:\n            g[name] = lambda *a, **k: None\n    f = f.f_back\n"
        "unittest.TestCase.assertEqual = lambda self, *a, **k: None\nreturn Counter()\n"),
    "swap_a_tests_defaults": ("cls = sys.modules['__test__'].TestCases\n"
                              "cls.test_empty.__defaults__ = (None,)\nreturn Counter()\n"),
    "a_thread_swaps_the_tests": (
        "import threading, time\ndef swap():\n    for _ in range(2000):\n"
        "        cls = sys.modules['__test__'].__dict__.get('TestCases')\n        if cls is not None:\n"
        "            for n in ('test_basic', 'test_empty', 'test_punctuation'):\n"
        "                setattr(cls, n, lambda self: None)\n            return\n        time.sleep(0.001)\n"
        "threading.Thread(target=swap, daemon=True).start()\nreturn Counter()\n"),
}
BCB_AT_LOAD = ("sys_exit_0", "os__exit_0", "patch_unittest", "patch_builtins_and_assertionerror",
               "print_a_result_line", "key_from_gc", "trace_the_harness", "report_through_the_hook",
               "disable_the_checks_then_patch", "a_thread_swaps_the_tests")
CASES_BCB = [(n, "in_call") for n in sorted(BCB_FORGERS)] + [(n, "at_load") for n in BCB_AT_LOAD]
# What each forger is caught as: its tampering (violation), its exit (early_exit), or, where it only
# printed or skipped, its wrong answer.
BCB_WANT = {n: "violation" for n in BCB_FORGERS}
BCB_WANT.update(sys_exit_0="early_exit", os__exit_0="early_exit", kill_the_harness="early_exit",
                print_a_result_line="test_failure", skip_the_test="test_failure",
                mark_the_tests_skipped="test_failure")


def _bcb_item():
    return data.load_bigcodebench_hard({"path": str(BCB_FIXTURE)}, splits=["complete"], limit=1)[0]


def test_bigcodebench_honest_control_passes():
    item = _bcb_item()
    _, prog = score.program_for(item, FORGE + item.prefix + item.extra["canonical_solution"])
    assert score.run_program(prog, SETTINGS)["passed"]
    _, prog = score.program_for(item, item.prefix + BCB_WRONG)
    assert not score.run_program(prog, SETTINGS)["passed"]


@pytest.mark.parametrize("name, where", CASES_BCB, ids=[f"{n}-{w}" for n, w in CASES_BCB])
def test_bigcodebench_forger_scores_as_failed(name, where):
    item = _bcb_item()
    body = BCB_FORGERS[name]
    if where == "in_call":
        _, prog = score.program_for(item, FORGE + item.prefix + textwrap.indent(body, "    "))
        assert body.splitlines()[0].strip() in prog.solution  # the sanitiser kept the forger
    else:  # module level: past the sanitiser, straight to the harness
        solution = FORGE + body.replace("return Counter()\n", "") + "\n" + item.prefix + BCB_WRONG
        prog = score.Program("unittest", solution, item.test, item.entry_point)
    r = score.run_program(prog, SETTINGS)
    assert not r["passed"], r
    assert r["sandbox_kind"] == "ok", r
    assert r["error_type"] == BCB_WANT[name], r


# Issue 32: programs that rewrite the names the test module uses for the length of one test (and put
# them back in a cleanup, so that the checks before each test see nothing). Each answers wrongly
# (an empty Counter) and would pass if the test's own `Counter` built empty Counters too.
REBINDERS = {
    # the 9-line solution of the issue: its globals() are the module the tests run in
    "rebind_through_its_globals": (
        "g = globals()\nreal = g['Counter']\ng['Counter'] = lambda *a, **k: real()\n"
        "sys._getframe(1).f_locals['self'].addCleanup(g.__setitem__, 'Counter', real)\nreturn real()\n"),
    # the test's own frame: its globals, whatever module they are
    "rebind_through_the_test_frame": (
        "g = sys._getframe(1).f_globals\nreal = g['Counter']\ng['Counter'] = lambda *a, **k: real()\n"
        "sys._getframe(1).f_locals['self'].addCleanup(g.__setitem__, 'Counter', real)\nreturn real()\n"),
    # at load, before the test module imports it: the library's own name
    "replace_the_library_name_at_load": (
        "import collections\nreal = collections.Counter\n"
        "collections.Counter = type('Counter', (real,), {'__init__': lambda self, *a, **k: real.__init__(self)})\n"),
    # what the test's code reads its names through: a constant of its code, reached from its frame
    "swap_the_names_the_test_code_holds": (
        "fake = lambda *a, **k: Counter()\nfor c in sys._getframe(1).f_code.co_consts:\n    if callable(c):\n"
        "        c.__call__ = lambda name: fake\n        c.__defaults__ = ({'Counter': fake},)\nreturn Counter()\n"),
}
# replacing a function's defaults ends the test process (the audit hook): caught as tampering
REBINDERS_WANT = {"swap_the_names_the_test_code_holds": "violation"}


@pytest.mark.parametrize("name", sorted(REBINDERS))
def test_the_test_module_cannot_be_rewritten_by_the_solution(name):
    item = _bcb_item()
    body = REBINDERS[name]
    if name.endswith("_at_load"):
        solution = body + item.prefix + BCB_WRONG
        prog = score.Program("unittest", solution, item.test, item.entry_point)
    else:
        _, prog = score.program_for(item, item.prefix + textwrap.indent(body, "    "))
        assert body.splitlines()[1].strip() in prog.solution  # the sanitiser kept it
    r = score.run_program(prog, SETTINGS)
    assert not r["passed"], r
    assert r["error_type"] == REBINDERS_WANT.get(name, "test_failure"), r


def test_forgers_fail_through_the_real_score_stage(tmp_path):
    """The score stage every task benchmark runs through (rule score): ten forged HumanEval replies
    of the issue's kinds, pass@1 0 %; the canonical reply passes."""
    from quantladder import scoring
    from quantladder.benchmarks import ScoringContext, create

    bench = create("humaneval", {"limit": 1, "timeout_s": 8.0})
    items, _ = bench.build_items(bench.fetch_source(str(tmp_path)), reference_gguf=None, family={})
    it = data.load_humaneval(limit=1)[0]
    replies = {"honest": FORGE + it.prompt + it.extra["canonical_solution"]}
    for name in ("nonce_from_frames", "nonce_from_proc_self", "nonce_from_the_parent", "print_a_result_line",
                 "kill_the_harness", "write_to_inherited_fds", "replace_check", "read_the_tests_for_the_answers",
                 "patch_builtins_and_assertionerror", "an_object_equal_to_everything"):
        replies[name] = _humaneval_program(name)[1]
    records = [{"item_id": items[0].id, "text": code, "code": code, "finish_reason": "stop", "n_gen_tokens": 10}
               for code in replies.values()]
    ctx = ScoringContext(env=bench.open_env({}, "score"), threads=1)
    correct = {}
    for name, rec in zip(replies, records):
        out = scoring.score(bench, items, [rec], {"key": "g"}, key=f"k-{name}", store_dir=tmp_path / name, ctx=ctx)
        (v,) = out.verdicts
        correct[name] = v["correct"]
    assert correct == {name: name == "honest" for name in replies}
